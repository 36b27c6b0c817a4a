"""Endpoints, addressing styles, regions and the credential chain's fast path."""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.errors import UsageError
from surge.s3.config import (
    make_target,
    resolve_credentials,
    resolve_endpoint,
    resolve_region,
    split_s3_url,
)
from surge.s3.sigv4 import Credentials

KEYS = Credentials("AK", "SK")


def test_split_s3_url() -> None:
    assert split_s3_url("s3://bucket") == ("bucket", "")
    assert split_s3_url("s3://bucket/") == ("bucket", "")
    assert split_s3_url("s3://my.bucket-1/a/b c/") == ("my.bucket-1", "a/b c/")
    for bad in ("bucket/key", "s3://", "s3:///key", "s3://UPPER", "http://bucket/"):
        with pytest.raises(UsageError):
            split_s3_url(bad)


def test_path_style_for_an_endpoint() -> None:
    target = make_target("bkt", endpoint_url="http://127.0.0.1:9000/", credentials=KEYS)
    assert (target.base_url, target.host, target.path) == (
        "http://127.0.0.1:9000",
        "127.0.0.1:9000",
        "/bkt",
    )
    behind = make_target("bkt", endpoint_url="https://gw.example/s3", credentials=KEYS)
    assert (behind.host, behind.path) == ("gw.example", "/s3/bkt")


def test_virtual_hosted_style_for_aws_except_dotted_names() -> None:
    target = make_target("bkt", region="eu-west-3", credentials=KEYS)
    assert (target.base_url, target.path) == ("https://bkt.s3.eu-west-3.amazonaws.com", "/")
    dotted = make_target("my.bkt", region="eu-west-3", credentials=KEYS)
    assert (dotted.host, dotted.path) == ("s3.eu-west-3.amazonaws.com", "/my.bkt")


def test_anonymous_has_no_signer() -> None:
    assert make_target("bkt", no_sign_request=True, region="us-east-1").signer is None


def test_bad_endpoint() -> None:
    with pytest.raises(UsageError, match="endpoint URL"):
        make_target("bkt", endpoint_url="ftp://x", credentials=KEYS)


def test_environment_comes_first_without_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "envkey")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "envtoken")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert resolve_credentials(None) == Credentials("envkey", "envsecret", "envtoken")
    assert resolve_region(None, None) == "ap-south-1"
    assert resolve_region("eu-north-1", None) == "eu-north-1"


def test_region_from_a_profile_else_us_east_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "aws-config"
    config.write_text("[profile eu]\nregion = eu-central-1\n")
    assert resolve_region(None, "eu") == "eu-central-1"
    assert resolve_region(None, None) == "us-east-1"


def test_the_environment_region_comes_before_a_named_profiles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "aws-config").write_text("[profile eu]\nregion = eu-central-1\n")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert resolve_region(None, "eu") == "ap-south-1"  # botocore: env, then profile


CONFIG = """\
[default]
endpoint_url = http://127.0.0.1:1001

[profile svc]
services = local
endpoint_url = http://127.0.0.1:1002

[services local]
dynamodb =
  endpoint_url = http://127.0.0.1:1003
s3 =
  endpoint_url = http://127.0.0.1:1004

[profile broken]
services = nowhere
"""


def test_endpoint_precedence_is_botocores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "aws-config").write_text(CONFIG)
    # botocore itself, on the same files and environment, is the reference
    botocore_session = pytest.importorskip("botocore.session")

    def botocores(profile: str | None) -> str:
        client = botocore_session.Session(profile=profile).create_client(
            "s3", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
        )
        return str(client.meta.endpoint_url)

    assert resolve_endpoint(None, None) == "http://127.0.0.1:1001" == botocores(None)
    assert resolve_endpoint(None, "svc") == "http://127.0.0.1:1004" == botocores("svc")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1005")
    assert resolve_endpoint(None, "svc") == "http://127.0.0.1:1005" == botocores("svc")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1006")
    assert resolve_endpoint(None, "svc") == "http://127.0.0.1:1006" == botocores("svc")
    assert resolve_endpoint("http://127.0.0.1:1007", "svc") == "http://127.0.0.1:1007"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert resolve_endpoint(None, "svc") is None
    assert botocores("svc") == "https://s3.amazonaws.com"
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    with pytest.raises(UsageError, match="services 'nowhere'"):
        resolve_endpoint(None, "broken")


def test_a_configured_endpoint_is_addressed_path_style(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    target = make_target("bkt", credentials=KEYS)
    assert (target.base_url, target.path) == ("http://127.0.0.1:9000", "/bkt")


def test_timeouts_come_from_the_flag_then_the_profile_then_the_aws_cli_s_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from surge.s3.api import ListOptions
    from surge.s3.config import resolve_timeouts

    assert resolve_timeouts(None, None, None) == (60.0, 60.0)  # the AWS CLI's
    config = tmp_path / "aws-config"
    config.write_text(
        "[default]\ncli_read_timeout = 7\ncli_connect_timeout = 0\n"
        "[profile slow]\ncli_read_timeout = 120\n[profile bad]\ncli_read_timeout = soon\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert resolve_timeouts(None, None, None) == (None, 7.0)  # 0: no limit, as the AWS CLI's
    assert resolve_timeouts(3, 2.5, None) == (3.0, 2.5)  # the flags win
    assert resolve_timeouts(None, None, "slow") == (60.0, 120.0)
    with pytest.raises(UsageError, match=r"aws-config: \[profile bad\] cli_read_timeout = 'soon'"):
        resolve_timeouts(None, None, "bad")
    with pytest.raises(UsageError):
        ListOptions(read_timeout=-1)
    # every S3 client is made with them
    client = ListOptions(read_timeout=4, connect_timeout=2).client(1, 60.0)
    assert (client.read_timeout, client.connect_timeout) == (4, 2)
    assert ListOptions().client(1, 60.0).read_timeout == 7.0
