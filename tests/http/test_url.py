"""URL parsing: the regex fast path agrees with the general path everywhere."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import example, given

from surge.errors import RequestError
from surge.http.url import URL, _dotted_quad, _parse_general, parse_url

_label = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
_hosts = st.lists(_label, min_size=1, max_size=4).map(".".join) | st.sampled_from(
    ["1.2.3.4", "[::1]", "localhost", "ex-ample.com", "-bad.com", "a..b", "ünï.com", "EXAMPLE.COM"]
)
_quads = st.lists(
    st.integers(0, 300).map(str) | st.sampled_from(["00", "01", "007", ""]), min_size=3, max_size=5
).map(".".join)
_hosts |= _quads
_paths = st.text("abcXYZ019-._~:/?#[]@!$&'()*+,;=% é", max_size=20)
_urls = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
    st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
    _hosts,
    st.sampled_from(["", ":80", ":443", ":8080", ":0", ":65536", ":x"]),
    _paths,
)


def parsed(parse: object, text: str) -> URL | str:
    try:
        return parse(text)  # type: ignore[operator,no-any-return]
    except RequestError as e:
        assert e.error_class == "invalid_url"
        return "invalid_url"


@given(_urls)
@example("http://site1.sim:8080/")
@example("https://example.com/a?b=c")
@example("http://999.1.1.1/")
@example("http://127.0.0.1:9000/bucket/key")
@example("http://10.0.0.255/")
@example("http://010.0.0.1/")
@example("http://1.2.3.4.5/")
@example("http://0.0.0.0/")
@example("http://0.0.a.0")  # numeric last label, a letter before: a name
@example("http://0x7f.1/a/../b")
def test_fast_path_agrees_with_the_general_path(text: str) -> None:
    parse_url.cache_clear()
    assert parsed(parse_url, text) == parsed(_parse_general, text)


def test_the_parts() -> None:
    url = parse_url("https://Example.com:8443/a%20b/ü?x=1#frag")
    assert url.key == ("https", "example.com", 8443)
    assert url.target == b"/a%20b/%C3%BC?x=1"
    assert url.host_header == b"example.com:8443"
    assert parse_url("http://[::1]/").host_header == b"[::1]"
    assert parse_url("http://ünï.com/").host == "ünï.com".encode("idna").decode()


def test_a_dotted_quad_takes_the_fast_path() -> None:
    """An IPv4 address in its normal form is parsed by the regex alone; one
    that ``ipaddress`` would write otherwise (leading zeros) is not."""
    parse_url.cache_clear()
    url = parse_url("http://127.0.0.1:9000/b/k")
    assert (url.host, url.port, url.key) == ("127.0.0.1", 9000, ("http", "127.0.0.1", 9000))
    assert url.auth is None and url.url == "http://127.0.0.1:9000/b/k"
    assert _dotted_quad("127.0.0.1") and _dotted_quad("0.0.0.0") and _dotted_quad("255.1.1.1")
    for host in ("010.0.0.1", "256.1.1.1", "1.2.3", "1.2.3.4.5", "1..2.3", "1.2.3."):
        assert not _dotted_quad(host), host


_numbers = st.sampled_from(
    ["0", "1", "127", "255", "256", "0x7f", "0x", "0X1F", "010", "08", "4294967295", "a", "0xg"]
)
_segments = st.sampled_from(["a", ".", "..", "", "%2e", "b.c", ".x"])
_shorthands = st.builds(
    lambda scheme, host, path, query: f"{scheme}{host}{path}{query}",
    st.sampled_from(["http://", "https://", "http:/", "http:///"]),
    st.lists(_numbers, min_size=1, max_size=5).map(".".join),
    st.lists(_segments, max_size=6).map(lambda p: "/" + "/".join(p)),
    st.sampled_from(["", "?x=/../", "?"]),
)


@given(_shorthands)
@example("http://127.1/a/../b")
@example("http:/0x7f.1/./")
def test_shorthands_parse_alike_on_both_paths_and_their_url_parses_to_itself(text: str) -> None:
    """Numeric hosts, dot segments and one or three slashes (as curl reads them):
    the fast path agrees with the general one, and the URL written for a record
    (final_url) is a request for the same host, port, target and Host."""
    parse_url.cache_clear()
    url = parsed(parse_url, text)
    assert url == parsed(_parse_general, text)
    if url != "invalid_url":
        again = parse_url(url.url)
        assert (again.host, again.port, again.target, again.host_header) == (
            url.host,
            url.port,
            url.target,
            url.host_header,
        )
