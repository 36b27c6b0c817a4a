"""SigV4 signatures against botocore's own signer, the reference implementation."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest
from tests.conftest import require

from surge.s3.sigv4 import UNSIGNED_PAYLOAD, Credentials, Signer, canonical_query

botocore_auth = require("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import Credentials as BotoCredentials  # noqa: E402

NOW = datetime(2026, 11, 22, 13, 4, 8, tzinfo=UTC)


def botocore_headers(
    url: str, credentials: Credentials, region: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = AWSRequest(method="GET", url=url, headers={})
    auth = botocore_auth.S3SigV4Auth(
        BotoCredentials(credentials.access_key, credentials.secret_key, credentials.token),
        "s3",
        region,
    )
    auth.add_auth(request)
    return {k.lower(): v for k, v in request.headers.items()}


@pytest.mark.parametrize("token", [None, "session/token+="])
@pytest.mark.parametrize(
    "params",
    [
        {"list-type": "2", "max-keys": "1000"},
        {
            "list-type": "2",
            "prefix": "dir with spaces/ünïcode/+&=?%",
            "delimiter": "/",
            "start-after": "a~b_c.d-e*f'g(h)!",
            "encoding-type": "url",
        },
        {"list-type": "2", "continuation-token": "1/abc+def==", "prefix": "日本語/"},
    ],
)
def test_signature_matches_botocore(
    params: dict[str, str], token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    host, path = "127.0.0.1:9000", "/my-bucket"
    query = canonical_query(params)
    signed = Signer(credentials, "eu-west-3").sign("GET", host, path, query, NOW)
    ours = {k.lower(): v for k, v in signed}
    theirs = botocore_headers(f"http://{host}{path}?{query}", credentials, "eu-west-3", monkeypatch)
    assert ours["authorization"] == theirs["authorization"]
    assert ours["x-amz-date"] == theirs["x-amz-date"] == "20261122T130408Z"
    assert ours["x-amz-content-sha256"] == theirs["x-amz-content-sha256"]
    assert ours.get("x-amz-security-token") == theirs.get("x-amz-security-token")


def test_signing_key_is_derived_once_a_day() -> None:
    signer = Signer(Credentials("AK", "SK"), "us-east-1")
    key = signer.signing_key("20261122")
    assert signer.signing_key("20261122") is key
    assert signer.signing_key("20261123") != key


def test_canonical_query_sorts_and_escapes_everything_but_unreserved() -> None:
    assert canonical_query({"b": "x y", "a": "ü/+~"}) == "a=%C3%BC%2F%2B~&b=x%20y"


def botocore_signed(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    credentials: Credentials,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    if url.startswith("https"):  # botocore's switch for UNSIGNED-PAYLOAD
        request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    auth = botocore_auth.S3SigV4Auth(
        BotoCredentials(credentials.access_key, credentials.secret_key, credentials.token),
        "s3",
        "us-west-2",
    )
    auth.add_auth(request)
    return {k.lower(): v for k, v in request.headers.items()}


@pytest.mark.parametrize("token", [None, "tok"])
@pytest.mark.parametrize(
    ("scheme", "payload_hash"),
    [
        # botocore signs the body's SHA-256 over http, UNSIGNED-PAYLOAD over https
        ("http", hashlib.sha256(b"part body").hexdigest()),
        ("https", UNSIGNED_PAYLOAD),
    ],
)
def test_put_with_payload_hash_and_amz_headers_matches_botocore(
    scheme: str, payload_hash: str, token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    host, path = "s3.us-west-2.amazonaws.com", "/b/dir%20x/ke%2By%C3%BC"
    query = canonical_query({"partNumber": "3", "uploadId": "a+b/c=="})
    extra = [
        ("x-amz-meta-owner", "  two  spaces  "),
        ("content-md5", "1B2M2Y8AsgTpgAmY7PHvCQ=="),
        ("x-amz-checksum-crc32", "DUoRhQ=="),
    ]
    signed = Signer(credentials, "us-west-2").sign(
        "PUT", host, path, query, NOW, headers=extra, payload_hash=payload_hash
    )
    ours = {k.lower(): v for k, v in signed}
    theirs = botocore_signed(
        "PUT",
        f"{scheme}://{host}{path}?{query}",
        dict(extra),
        b"part body",
        credentials,
        monkeypatch,
    )
    assert ours["x-amz-content-sha256"] == theirs["x-amz-content-sha256"] == payload_hash
    assert ours["authorization"] == theirs["authorization"]
    assert "content-md5;host;x-amz-checksum-crc32" in ours["authorization"]


def test_uploads_query_without_a_value_matches_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    # CreateMultipartUpload: POST ?uploads (a name without a value)
    credentials = Credentials("AK", "SK")
    host, path = "s3.us-west-2.amazonaws.com", "/b/key"
    query = canonical_query({"uploads": ""})
    signed = Signer(credentials, "us-west-2").sign(
        "POST", host, path, query, NOW, payload_hash=UNSIGNED_PAYLOAD
    )
    theirs = botocore_signed(
        "POST", f"https://{host}{path}?{query}", {}, b"", credentials, monkeypatch
    )
    assert {k.lower(): v for k, v in signed}["authorization"] == theirs["authorization"]
