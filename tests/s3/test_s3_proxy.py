"""S3 listings and transfers through a proxy: the same HTTP client, so the same
proxies (``ListOptions(proxy=)``, ``surge s3 ls --proxy``, or the
environment's), and the same TLS options for an https:// one."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme
from click.testing import CliRunner
from tests.http.conftest import StartProxy, start_proxy  # noqa: F401 - a fixture, used by name
from tests.http.test_proxy import tls_front
from tests.s3._buckets import Buckets
from tests.s3.test_cp import new_bucket

from surge.cli import main
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


@contextmanager
def https_front(proxy_port: int, context: ssl.SSLContext) -> Iterator[int]:
    """TLS in front of a plain proxy (tests/http's ``tls_front``), on a loop of
    its own in a thread: the S3 calls below run their own loops."""
    loop = asyncio.new_event_loop()
    port: Future[int] = Future()
    stop = asyncio.Event()

    async def serve() -> None:
        async with tls_front(proxy_port, context) as front:
            port.set_result(front)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        yield port.result(10)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def test_an_https_proxy_with_its_own_ca_or_unverified(
    buckets: Buckets,
    start_proxy: StartProxy,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``surge s3 ls/cp/sync --proxy https://... --proxy-cacert FILE`` (or
    ``--proxy-insecure``), as surge fetch's and curl's: TLS to the proxy
    trusts that CA (or nothing); without either, a proxy whose certificate the
    system does not trust is a tls_error."""
    tinyproxy = start_proxy("tinyproxy")
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    proxy_ca = tmp_path / "proxy-ca.pem"
    ca.cert_pem.write_to_path(str(proxy_ca))
    bucket = new_bucket(buckets, {"dir/a.txt": b"through the proxy", "dir/b.txt": b"b"})
    env = {
        "AWS_ACCESS_KEY_ID": buckets.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": buckets.credentials.secret_key,
    }

    def s3(*args: str) -> Any:
        common = ["--endpoint-url", buckets.endpoint_url, "--proxy", proxy]
        retries = ["--retries", "0"] if args[0] != "ls" else []
        return CliRunner().invoke(main, ["s3", *args, *common, *retries], env=env)

    with https_front(tinyproxy.port, context) as port:
        proxy = f"https://localhost:{port}"
        listed = list_all(
            f"s3://{bucket}/", proxy=proxy, proxy_cafile=str(proxy_ca), **buckets.options()
        )
        assert sorted(e.key for e in listed) == ["dir/a.txt", "dir/b.txt"]  # type: ignore[union-attr]
        ls = s3("ls", f"s3://{bucket}/dir/", "--proxy-insecure")
        assert ls.exit_code == 0 and "a.txt" in ls.stdout
        cp = s3(
            "cp",
            f"s3://{bucket}/dir/a.txt",
            str(tmp_path / "a.txt"),
            "--proxy-cacert",
            str(proxy_ca),
        )
        assert cp.exit_code == 0, cp.stderr
        assert (tmp_path / "a.txt").read_bytes() == b"through the proxy"
        up = s3("sync", str(tmp_path / "up"), f"s3://{bucket}/up/", "--proxy-insecure")
        assert up.exit_code == 2  # no such directory: a usage error, before any request
        (tmp_path / "up").mkdir()
        (tmp_path / "up" / "c.txt").write_bytes(b"up")
        up = s3("sync", str(tmp_path / "up"), f"s3://{bucket}/up/", "--proxy-cacert", str(proxy_ca))
        assert up.exit_code == 0, up.stderr
        assert buckets.s3.get_object(Bucket=bucket, Key="up/c.txt")["Body"].read() == b"up"
        # the proxy's certificate is checked otherwise: the object fails alone
        cp = s3("cp", f"s3://{bucket}/dir/b.txt", str(tmp_path / "b.txt"))
        assert cp.exit_code == 1 and "tls_error" in cp.stderr and "certificate" in cp.stderr
        assert not (tmp_path / "b.txt").exists()
    assert f"GET {buckets.endpoint_url}/{bucket}/dir/a.txt" in tinyproxy.log_text()
