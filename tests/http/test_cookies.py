"""Cookies, against a real httpbin: kept from responses (redirect hops too),
sent back by the jar's rules, bounded, and looked up by the host's domains only."""

from __future__ import annotations

import pytest

import surge
from surge.http import AsyncClient, Client
from surge.http.cookies import CookieStore, Jar


def test_the_client_keeps_what_servers_set(httpbin: str) -> None:
    with Client() as client:
        set_response = client.get(f"{httpbin}/cookies/set/session/abc")
        assert set_response.status_code == 302 and set_response.cookies == {"session": "abc"}
        assert client.get(f"{httpbin}/cookies").json() == {"cookies": {"session": "abc"}}
        client.get(f"{httpbin}/cookies/delete?session=")
        assert client.get(f"{httpbin}/cookies").json() == {"cookies": {}}
        assert len(client.async_client.cookies) == 0


def test_a_redirect_hop_sets_cookies_for_the_next(httpbin: str) -> None:
    """/cookies/set?... answers 302 with Set-Cookie, to /cookies: the cookie it
    set goes with the very next hop (a login flow's shape)."""
    with Client(follow_redirects=True) as client:
        response = client.get(f"{httpbin}/cookies/set", params={"a": "1", "b": "2"})
    assert response.redirects == 1
    assert response.json() == {"cookies": {"a": "1", "b": "2"}}


def test_cookies_given_by_the_caller(httpbin: str) -> None:
    assert surge.get(f"{httpbin}/cookies", cookies={"k": "v"}).json() == {"cookies": {"k": "v"}}
    with Client(cookies=False) as client:
        client.get(f"{httpbin}/cookies/set/a/1")
        assert client.get(f"{httpbin}/cookies").json() == {"cookies": {}}
        with pytest.raises(ValueError, match="keeps no cookies"):
            _ = client.async_client.cookies
    with Client() as client:  # the caller's own Cookie header wins over the jar
        client.get(f"{httpbin}/cookies/set/a/1")
        mine = client.get(f"{httpbin}/cookies", headers={"Cookie": "mine=1"})
        assert mine.json() == {"cookies": {"mine": "1"}}


async def test_a_cookie_stays_with_its_host(httpbin: str) -> None:
    """Set by 127.0.0.1, not sent to localhost (same server, another host)."""
    port = httpbin.rsplit(":", 1)[1]
    async with AsyncClient() as client:
        await client.get(f"{httpbin}/cookies/set/a/1")
        here = await client.get(f"{httpbin}/cookies")
        there = await client.get(f"http://localhost:{port}/cookies")
    assert here.json() == {"cookies": {"a": "1"}}
    assert there.json() == {"cookies": {}}


def test_the_jar_is_bounded() -> None:
    store = CookieStore(max_cookies=5)
    for i in range(12):
        head = b"HTTP/1.1 200 OK\r\nSet-Cookie: c%d=%d; Path=/" % (i, i)
        store.extract(f"http://host{i}.example/", head)
    names = sorted(c.name for c in store.jar)
    assert names == ["c10", "c11", "c7", "c8", "c9"]  # the newest five


def test_a_lookup_looks_at_the_hosts_domains_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 hosts' cookies in the jar: a request to one of them looks at its own
    domains, not at all 1,000 (http.cookiejar's CookieJar looks at every one)."""
    store = CookieStore()
    for i in range(1000):
        head = b"HTTP/1.1 200 OK\r\nSet-Cookie: id=%d; Path=/" % i
        store.extract(f"http://h{i}.example.com/", head)
    store.extract(
        "http://www.shop.example.com/", b"HTTP/1.1 200 OK\r\nSet-Cookie: d=1; Domain=example.com"
    )
    looked: list[str] = []
    original = Jar._cookies_for_domain  # type: ignore[attr-defined]

    def counting(self: Jar, domain: str, request: object) -> object:
        looked.append(domain)
        return original(self, domain, request)

    monkeypatch.setattr(Jar, "_cookies_for_domain", counting)
    assert store.header("http://h7.example.com/x") == b"Cookie: id=7; d=1\r\n"
    assert sorted(looked) == [".example.com", "h7.example.com"]
