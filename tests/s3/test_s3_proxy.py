"""S3 listings through a proxy: the same HTTP client, so the same proxies
(``ListOptions(proxy=)``, ``surge s3 ls --proxy``, or the environment's)."""

from __future__ import annotations

import pytest
from tests.http.conftest import StartProxy, start_proxy  # noqa: F401 - a fixture, used by name
from tests.s3._buckets import Buckets

from surge.errors import S3Error
from surge.s3 import list_all


def test_a_listing_goes_through_the_proxy(
    buckets: Buckets,
    start_proxy: StartProxy,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys that need escaping, listed through tinyproxy (signed requests in
    absolute form), as boto3 lists them direct; then through the environment's
    http_proxy, which, stopped, fails the listing."""
    tinyproxy = start_proxy("tinyproxy")
    expected = sorted(buckets.boto3_keys("awkward"))
    options = buckets.options(proxy=tinyproxy.url(), parallel=4)
    assert sorted(e.key for e in list_all("s3://awkward", **options)) == expected  # type: ignore[union-attr]
    assert f"GET {buckets.endpoint_url}/awkward?" in tinyproxy.log_text()
    monkeypatch.setenv("http_proxy", tinyproxy.url())
    listed = list_all("s3://awkward", **buckets.options(parallel=4))
    assert sorted(e.key for e in listed) == expected  # type: ignore[union-attr]
    tinyproxy.stop()
    with pytest.raises(S3Error, match="connect_refused: cannot reach the proxy"):
        list(list_all("s3://awkward", **buckets.options(parallel=4, retries=0)))
