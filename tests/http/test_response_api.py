"""The response and error API a requests/httpx user reaches for, against a real
httpbin: httpx's names (status_code, content, text, json(), raise_for_status(),
headers.get_list()), and one exception class per error class."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

import surge
from surge.http import (
    AsyncClient,
    Client,
    ConnectError,
    ConnectTimeout,
    DNSError,
    Headers,
    HTTPStatusError,
    InvalidURL,
    ReadTimeout,
    RequestError,
    TimeoutException,
)


async def test_status_json_and_raise_for_status(httpbin: str) -> None:
    async with AsyncClient() as client:
        ok = await client.get(f"{httpbin}/json")
        missing = await client.get(f"{httpbin}/status/404")
        broken = await client.get(f"{httpbin}/status/503")
    assert ok.status_code == 200 and ok.is_success
    assert ok.json()["slideshow"]["title"] == "Sample Slide Show"
    assert ok.raise_for_status() is ok  # chains
    assert missing.status_code == 404 and not missing.is_success
    with pytest.raises(HTTPStatusError, match="404 client error") as caught:
        missing.raise_for_status()
    assert caught.value.response is missing
    with pytest.raises(HTTPStatusError, match="503 server error"):
        broken.raise_for_status()


async def test_headers_are_a_case_insensitive_multi_map(httpbin: str) -> None:
    """/response-headers sends each query parameter back as a header, repeats too."""
    async with AsyncClient() as client:
        response = await client.get(f"{httpbin}/response-headers?X-Multi=one&X-Multi=two")
    headers = response.headers
    assert isinstance(headers, Headers)
    assert headers.get_list("x-multi") == ["one", "two"]
    assert headers["X-MULTI"] == "one, two" and "x-Multi" in headers
    assert headers.get("x-absent") is None and headers.get_list("x-absent") == []
    assert ("X-Multi", "one") in headers.multi_items()
    assert response.header("x-multi") == "one"  # the first value
    assert "content-type" in list(headers)  # names, lower-cased, each once


async def test_text_follows_the_charset(httpbin: str) -> None:
    async with AsyncClient() as client:
        utf8 = await client.get(f"{httpbin}/encoding/utf8")
        latin = await client.get(
            f"{httpbin}/response-headers?Content-Type=text/plain;%20charset=ISO-8859-1&x=%C3%A9"
        )
    assert utf8.encoding == "utf-8" and "∮ E⋅da = Q" in utf8.text
    # httpbin adds its own Content-Type first; the last one counts (Fetch's rule).
    assert latin.headers.get_list("content-type")[-1] == "text/plain; charset=ISO-8859-1"
    assert latin.encoding == "iso-8859-1"
    assert latin.text == latin.content.decode("iso-8859-1")
    assert latin.headers["x"] == "é"  # the header's byte 0xE9, read as latin-1


@pytest.mark.parametrize("coding", ["gzip", "deflate", "brotli"])
async def test_content_is_decoded(httpbin: str, coding: str) -> None:
    async with AsyncClient() as client:
        response = await client.get(f"{httpbin}/{coding}")
    flag = {"gzip": "gzipped", "deflate": "deflated", "brotli": "brotli"}[coding]
    assert response.json()[flag] is True
    assert response.content == response.body and response.bytes < len(response.content)


async def test_elapsed_is_the_timings_span(httpbin: str) -> None:
    async with AsyncClient() as client:
        response = await client.get(f"{httpbin}/bytes/100")
    t = response.timings
    assert t.started is not None and t.done is not None
    assert response.elapsed == timedelta(seconds=t.done - t.started) > timedelta(0)
    assert len(response.content) == 100


async def test_each_error_class_is_a_type_to_catch(httpbin: str) -> None:
    async with AsyncClient(max_time=0.3) as client:
        with pytest.raises(ReadTimeout) as slow:
            await client.get(f"{httpbin}/delay/3")
        with pytest.raises(InvalidURL):
            await client.get("http://exa mple.com/")
        with pytest.raises(DNSError) as unknown:
            await client.get("http://no-such-host.invalid/")
    assert isinstance(slow.value, TimeoutException) and isinstance(slow.value, TimeoutError)
    assert slow.value.error_class == "read_timeout" and isinstance(slow.value, RequestError)
    assert isinstance(unknown.value, ConnectError) and unknown.value.error_class == "dns_error"
    copy = pickle.loads(pickle.dumps(slow.value))  # a cluster worker's error travels whole
    assert type(copy) is ReadTimeout and copy.detail == slow.value.detail
    assert copy.url == slow.value.url


# -- the synchronous client and httpx's request arguments --------------------------------


def test_the_sync_client_reuses_its_connection(httpbin: str) -> None:
    with Client() as client:
        first = client.get(f"{httpbin}/get", params={"q": "surge", "n": [1, 2]})
        second = client.get(f"{httpbin}/get?a=b", params=[("c", "d")])
        assert client.stats()["created"] == 1  # keep-alive across calls
    assert first.json()["args"] == {"q": "surge", "n": ["1", "2"]}
    assert second.json()["args"] == {"a": "b", "c": "d"}
    assert first.url.endswith("/get?q=surge&n=1&n=2")
    with pytest.raises(RuntimeError, match="closed"):
        client.get(f"{httpbin}/get")


def test_bodies_json_form_and_content(httpbin: str) -> None:
    with Client() as client:
        as_json = client.post(f"{httpbin}/post", json={"name": "é", "n": [1, None]}).json()
        as_form = client.put(f"{httpbin}/put", data={"a": "1 2", "b": ["x", "y"]}).json()
        raw = client.patch(
            f"{httpbin}/patch", content=b"\x00\xff", headers={"Content-Type": "application/x-raw"}
        ).json()
        gone = client.delete(f"{httpbin}/delete")
    assert as_json["json"] == {"name": "é", "n": [1, None]}
    assert as_json["headers"]["Content-Type"] == "application/json"
    assert as_form["form"] == {"a": "1 2", "b": ["x", "y"]}
    assert as_form["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert raw["data"] == "data:application/octet-stream;base64,AP8="
    assert raw["headers"]["Content-Type"] == "application/x-raw"  # the caller's wins
    assert gone.status_code == 200


def test_one_body_argument_at_most(httpbin: str) -> None:
    with Client() as client, pytest.raises(ValueError, match="one request body"):
        client.post(f"{httpbin}/post", json={}, content=b"x")


def test_module_functions_and_a_per_request_timeout(httpbin: str) -> None:
    response = surge.get(f"{httpbin}/basic-auth/u/p", auth=("u", "p"))
    assert response.status_code == 200 and response.json() == {"authenticated": True, "user": "u"}
    assert surge.post(f"{httpbin}/post", json=[1]).json()["json"] == [1]
    with Client(max_time=30) as client, pytest.raises(ReadTimeout, match=r"limit 0.3 s"):
        client.get(f"{httpbin}/delay/3", timeout=0.3)


async def test_the_sync_client_works_where_a_loop_runs(httpbin: str) -> None:
    """As in Jupyter: this thread runs an event loop, inside which the client's own
    cannot run; the call blocks, as requests' would, and returns the response."""
    with Client() as client:
        assert client.get(f"{httpbin}/get").status_code == 200
        assert client.get(f"{httpbin}/get").status_code == 200
        assert client.stats()["created"] == 1
    assert surge.get(f"{httpbin}/status/204").status_code == 204


def test_debug_logging_is_a_line_per_phase_and_silent_by_default(
    httpbin: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="surge"), Client() as client:
        client.get(f"{httpbin}/get")
    assert caplog.records == []  # nothing at INFO
    with caplog.at_level("DEBUG", logger="surge"), Client() as client:
        client.get(f"{httpbin}/bytes/10")
        with pytest.raises(RequestError):
            client.get("http://no-such-host.invalid/")
    lines = [r.getMessage() for r in caplog.records if r.name == "surge.http"]
    phases = [line.split()[2] for line in lines if line.startswith("GET ") and " ms" in line]
    assert phases == ["dns", "connect", "ttfb", "body"]
    assert any(line.endswith("-> 200, 10 bytes on the wire") for line in lines)
    assert any("failed: dns_error" in line for line in lines)


def test_per_request_auth_goes_to_its_origin_only(httpbin: str) -> None:
    """auth= on one request: Basic to httpbin; after a redirect to another origin
    (127.0.0.1 -> localhost, another host name) it is not sent along."""
    port = httpbin.rsplit(":", 1)[1]
    with Client(follow_redirects=True) as client:
        ok = client.get(f"{httpbin}/basic-auth/u/p", auth=("u", "p"))
        denied = client.get(f"{httpbin}/basic-auth/u/p")
        moved = client.get(
            f"{httpbin}/redirect-to",
            params={"url": f"http://localhost:{port}/headers"},
            auth=("u", "p"),
        )
    assert ok.status_code == 200 and denied.status_code == 401
    assert moved.status_code == 200 and moved.redirects == 1
    assert moved.final_url.startswith("http://localhost:")
    assert "Authorization" not in moved.json()["headers"]


def test_a_timeout_object_sets_each_phase(httpbin: str, silent_port: int) -> None:
    """Timeout(total, connect=): the total is the request's max_time, the connect
    limit applies to a connection opened for the request (a TLS handshake that
    never answers, here), each named in its error."""
    with Client(max_time=30, connect_timeout=20) as client:
        with pytest.raises(ReadTimeout, match=r"limit 0.3 s"):
            client.get(f"{httpbin}/delay/3", timeout=surge.http.Timeout(0.3))
        with pytest.raises(ConnectTimeout, match=r"TLS handshake \(limit 0.2 s\)"):
            client.get(f"https://127.0.0.1:{silent_port}/", timeout=surge.http.Timeout(connect=0.2))
        with pytest.raises(ValueError, match="positive"):
            client.get(f"{httpbin}/get", timeout=surge.http.Timeout(connect=0))
    with Client(timeout=surge.http.Timeout(0.3, connect=5)) as client:  # httpx's client option
        assert client.async_client.max_time == 0.3
        assert client.async_client.connect_timeout == 0.3  # never past the total
        with pytest.raises(ReadTimeout):
            client.get(f"{httpbin}/delay/3")


def test_auth_may_be_a_callable_and_stays_with_its_origin(httpbin: str) -> None:
    """A callable adds its headers (a bearer token here) to each request, once,
    seeing the method, the URL with its params and the body; what it adds is a
    credential: a redirect to another origin does not carry it."""
    seen: list[surge.http.Request] = []

    def bearer(request: surge.http.Request) -> None:
        seen.append(request)
        request.headers["Authorization"] = "Bearer t0ken"

    port = httpbin.rsplit(":", 1)[1]
    with Client(follow_redirects=True) as client:
        ok = client.get(f"{httpbin}/bearer", auth=bearer, params={"a": "1"})
        posted = client.post(f"{httpbin}/anything", auth=bearer, json={"x": 1})
        moved = client.get(
            f"{httpbin}/redirect-to",
            params={"url": f"http://localhost:{port}/headers"},
            auth=bearer,
        )
    with Client(auth=bearer) as client:  # the client's: called for each request
        client.get(f"{httpbin}/bearer")
        client.get(f"{httpbin}/bearer")
    assert ok.status_code == 200 and ok.json() == {"authenticated": True, "token": "t0ken"}
    assert posted.json()["headers"]["Authorization"] == "Bearer t0ken"
    assert moved.status_code == 200 and "Authorization" not in moved.json()["headers"]
    assert [r.method for r in seen] == ["GET", "POST", "GET", "GET", "GET"]
    assert seen[0].url == f"{httpbin}/bearer?a=1" and seen[1].content == b'{"x":1}'
    with pytest.raises(ValueError, match="auth= takes"):
        Client(auth="user:password")


def test_a_requests_headers_replace_the_clients_of_the_same_name(httpbin: str) -> None:
    """As httpx merges them: one User-Agent (the request's), one X-A."""
    with Client(headers={"X-A": "client", "X-B": "kept"}) as client:
        seen = client.get(
            f"{httpbin}/headers", headers={"user-agent": "mine/1", "x-a": "request"}
        ).json()["headers"]
        plain = client.get(f"{httpbin}/headers").json()["headers"]
    assert seen["User-Agent"] == "mine/1" and seen["X-A"] == "request" and seen["X-B"] == "kept"
    assert plain["User-Agent"].startswith("surge/") and plain["X-A"] == "client"


def test_url_is_the_one_that_answered_and_history_the_hops(httpbin: str) -> None:
    """httpx's and requests' meanings: ``url`` after redirects, ``history`` the
    redirect responses in order, each whole (status, headers, its own URL)."""
    with Client(follow_redirects=True) as client:
        moved = client.get(f"{httpbin}/redirect/3")
        direct = client.get(f"{httpbin}/get")
        with client.stream("GET", f"{httpbin}/redirect/2") as streamed:
            streamed.read()
    assert moved.url == f"{httpbin}/get" and moved.requested_url == f"{httpbin}/redirect/3"
    assert [hop.status_code for hop in moved.history] == [302, 302, 302]
    assert moved.history[0].url == f"{httpbin}/redirect/3"
    assert moved.history[1].headers["location"] == "/relative-redirect/1"
    assert moved.history[2].url == f"{httpbin}/relative-redirect/1"
    assert direct.history == [] and direct.url == f"{httpbin}/get"
    assert [hop.status_code for hop in streamed.history] == [302, 302]


async def test_the_clients_at_the_top_level_with_httpxs_names(httpbin: str) -> None:
    """surge.Client and surge.AsyncClient, as the README shows them; the sync
    client's .cookies; AsyncClient.aclose() (httpx's name for close)."""
    assert surge.Client is Client and surge.AsyncClient is surge.http.AsyncClient
    assert {"Client", "AsyncClient"} <= set(dir(surge))
    with surge.Client() as client:
        client.get(f"{httpbin}/cookies/set/a/1")
        assert [cookie.name for cookie in client.cookies] == ["a"]
    client_async = surge.AsyncClient()
    assert (await client_async.get(f"{httpbin}/get")).status == 200
    assert client_async.stats()["open"] == 1
    await client_async.aclose()
    assert client_async.stats()["open"] == 0
