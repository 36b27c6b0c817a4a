"""Servers that get ListObjectsV2 wrong: every listing is exact or a clear error,
within a bounded number of requests and keys (tests/s3/deviant.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from tests.s3.deviant import SLOWDOWNS, DeviantServer, deviant_server

from surge.cli import main
from surge.errors import S3Error
from surge.s3 import ListOptions, S3Object, list_all

PAGE = 50


@pytest.fixture(scope="module")
def deviant() -> Iterator[DeviantServer]:
    with deviant_server() as server:
        yield server


def listing(
    server: DeviantServer, bucket: str, *, notices: list[str] | None = None, **kwargs: Any
) -> tuple[list[str], S3Error | None, ListOptions]:
    """The keys handed on before the listing ended, and the error it ended with."""
    options = ListOptions(
        endpoint_url=server.endpoint_url,
        no_sign_request=True,
        page_size=kwargs.pop("page_size", PAGE),
        notice=(notices.append if notices is not None else None),
        **kwargs,
    )
    keys: list[str] = []
    try:
        for entry in list_all(f"s3://{bucket}", options=options):
            keys.append(entry.key if isinstance(entry, S3Object) else entry.prefix)
    except S3Error as error:
        return keys, error, options
    return keys, None, options


def bounded(server: DeviantServer, keys: list[str], options: ListOptions) -> None:
    assert len(keys) == len(set(keys)), "a key handed on twice"
    assert len(keys) <= len(server.keys)
    pages = len(server.keys) // options.page_size + 1
    assert options.stats.requests <= 3 * pages + 50  # no loop


@pytest.mark.parametrize("parallel", [1, 2, 16])
def test_the_conforming_bucket_is_exact(deviant: DeviantServer, parallel: int) -> None:
    keys, error, options = listing(deviant, "s3", parallel=parallel)
    assert error is None and sorted(keys) == deviant.keys
    assert options.stats.fallback is None
    if parallel > 1:
        assert options.stats.ranges + options.stats.groups > 1  # it did fan out


@pytest.mark.parametrize(("parallel", "recursive"), [(1, True), (16, True), (1, False)])
def test_a_repeated_token_is_an_error(
    deviant: DeviantServer, parallel: int, recursive: bool
) -> None:
    keys, error, options = listing(
        deviant, "repeat-token", parallel=parallel, recursive=recursive, page_size=10
    )
    bounded(deviant, keys, options)
    if parallel == 1:
        assert error is not None and error.code == "InvalidListing"
        assert "the same next token was received twice" in error.message
    else:  # the fan-out lists by key range: exact, or the repeated token is seen
        assert error is None or error.code == "InvalidListing"
        assert error is not None or sorted(keys) == deviant.keys


def test_an_ignored_start_after_is_an_error_in_parallel(deviant: DeviantServer) -> None:
    keys, error, options = listing(deviant, "ignore-start-after", parallel=16)
    bounded(deviant, keys, options)
    assert error is not None and error.code == "InvalidListing"
    assert "does not honour start-after" in error.message


def test_an_ignored_start_after_does_not_matter_sequentially(deviant: DeviantServer) -> None:
    keys, error, _ = listing(deviant, "ignore-start-after", parallel=1)
    assert error is None and keys == deviant.keys  # by token, in S3's order


@pytest.mark.parametrize("bucket", ["utf16", "no-prefixes"])
@pytest.mark.parametrize("parallel", [1, 16])
def test_a_deviant_order_or_delimiter_falls_back_to_an_exact_sequential_listing(
    deviant: DeviantServer, bucket: str, parallel: int
) -> None:
    notices: list[str] = []
    keys, error, options = listing(deviant, bucket, parallel=parallel, notices=notices)
    assert error is None
    assert len(keys) == len(set(keys)) and sorted(keys) == deviant.keys
    if parallel > 1:
        assert len(notices) == 1 and "listing sequentially" in notices[0]
        assert options.stats.fallback is not None
        assert options.stats.ranges == options.stats.groups == 0


@pytest.mark.parametrize(("bucket", "ctype"), [("html", "text/html"), ("json", "application/json")])
@pytest.mark.parametrize("recursive", [True, False])
def test_a_200_that_is_not_a_listing_is_an_error_naming_it(
    deviant: DeviantServer, bucket: str, ctype: str, recursive: bool
) -> None:
    keys, error, _ = listing(deviant, bucket, recursive=recursive)
    assert keys == []
    assert error is not None and error.code == "NotListBucketResult"
    assert ctype in error.message and not error.is_usage


def test_slowdown_is_retried(deviant: DeviantServer) -> None:
    deviant.slowdowns = 0
    keys, error, options = listing(deviant, "slowdown", parallel=1)
    assert error is None and keys == deviant.keys
    assert options.stats.retries == SLOWDOWNS


def test_slowdown_for_ever_gives_up_after_the_retries(deviant: DeviantServer) -> None:
    keys, error, options = listing(deviant, "slowdown-always", parallel=4, retries=2)
    assert keys == [] and error is not None and error.code == "SlowDown"
    assert options.stats.requests <= 2 * 3  # the two first pages, three tries each


def cli_args(deviant: DeviantServer) -> list[str]:
    return ["s3", "ls", "--endpoint-url", deviant.endpoint_url, "--no-sign-request", "-r"]


def test_the_cli_stops_with_one_line_and_status_1(deviant: DeviantServer) -> None:
    result = CliRunner().invoke(
        main,
        [*cli_args(deviant), "--parallel", "1", "--page-size", "100", "s3://repeat-token"],
    )
    assert result.exit_code == 1
    assert len(result.stdout.splitlines()) <= len(deviant.keys)
    assert result.stderr.count("\n") == 1 and "same next token" in result.stderr


def test_the_cli_says_once_that_it_lists_sequentially(deviant: DeviantServer) -> None:
    result = CliRunner().invoke(
        main,
        [*cli_args(deviant), "--page-size", "100", "s3://utf16"],
    )
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(deviant.keys)
    assert result.stderr.count("\n") == 1 and "listing sequentially" in result.stderr
