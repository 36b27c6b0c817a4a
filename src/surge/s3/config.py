"""Where to send S3 requests and how to sign them: endpoint, region, credentials.

Credentials come from the standard chain, as the AWS CLI finds them. botocore
implements that chain (environment, shared credentials and config files with
profiles, SSO, assume-role, container and instance metadata) and is the field's
reference, so surge asks it rather than re-implementing the chain. Importing
botocore costs ~0.1-0.2 s, so the commonest case - keys in the environment and
no ``--profile`` - is read directly, in the same order of precedence botocore
uses (the environment comes first unless a profile is named).

Addressing: path-style (``http://host:port/bucket``) whenever ``endpoint_url``
is given, as S3-compatible servers (MinIO, Ceph, ...) expect; virtual-hosted
(``https://bucket.s3.region.amazonaws.com``) for AWS itself, as AWS requires
for new buckets, except for bucket names with dots (they break the TLS name).
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass
from urllib.parse import quote

from surge.errors import UsageError
from surge.http.url import parse_url
from surge.s3.sigv4 import Credentials, Signer

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,254}", re.ASCII)


@dataclass(frozen=True)
class Target:
    """Everything a request for one bucket needs, computed once."""

    bucket: str
    base_url: str  # scheme://host[:port]
    host: str  # the Host header exactly as sent, for signing
    path: str  # the bucket's path, URI-encoded ("/bucket" or "/")
    region: str
    signer: Signer | None  # None: anonymous (--no-sign-request)


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix); a UsageError names what is wrong."""
    if not url.startswith("s3://"):
        raise UsageError(f"{url!r}: expected s3://bucket[/prefix]")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket:
        raise UsageError(f"{url!r}: no bucket name")
    if not _BUCKET.fullmatch(bucket):
        raise UsageError(f"{url!r}: {bucket!r} is not a valid bucket name")
    return bucket, prefix


def resolve_credentials(profile: str | None) -> Credentials | None:
    """The standard chain's credentials, or None if it finds none."""
    env = os.environ
    if profile is None and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(
            env["AWS_ACCESS_KEY_ID"],
            env["AWS_SECRET_ACCESS_KEY"],
            env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None,
        )
    session = _botocore_session(profile)
    found = session.get_credentials()
    if found is None:
        return None
    # Frozen once per listing: refreshable credentials (SSO, assume-role) last 15
    # minutes at the least, far longer than a listing's few seconds.
    frozen = found.get_frozen_credentials()
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


def resolve_region(region: str | None, profile: str | None) -> str:
    """The flag, else AWS_REGION / AWS_DEFAULT_REGION (unless a profile is named),
    else the profile's ``region`` in the config file, else us-east-1.

    The config file is read here with configparser rather than through a
    botocore session: importing botocore and building a session cost ~0.15 s
    of CPU, two thirds of a 7,500-object listing's whole client CPU."""
    if region:
        return region
    env = os.environ
    if profile is None and (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        return env.get("AWS_REGION") or env["AWS_DEFAULT_REGION"]
    name = profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    path = env.get("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")
    config = configparser.RawConfigParser()
    try:
        config.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        config = configparser.RawConfigParser()  # unreadable: as if absent, like botocore
    section = "default" if name == "default" else f"profile {name}"
    found = config.get(section, "region", fallback=None)
    if found:
        return found.strip()
    if profile is not None and not config.has_section(section):
        _botocore_session(profile)  # a profile may live in the credentials file only
    return "us-east-1"


def _botocore_session(profile: str | None):  # type: ignore[no-untyped-def]
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:  # pragma: no cover - depends on the environment
        raise UsageError(
            "reading AWS profiles needs botocore: pip install 'surge[s3]' "
            "(or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        ) from None
    try:
        session = botocore.session.Session(profile=profile)
        session.get_scoped_config()  # raises ProfileNotFound now, not later
    except botocore.exceptions.ProfileNotFound:
        raise UsageError(f"--profile {profile}: no such profile in the AWS config files") from None
    return session


def make_target(
    bucket: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    no_sign_request: bool = False,
    credentials: Credentials | None = None,
) -> Target:
    """Resolve the endpoint, the region and (unless anonymous) the credentials."""
    region = resolve_region(region, profile)
    signer = None
    if not no_sign_request:
        if credentials is None:
            credentials = resolve_credentials(profile)
        if credentials is None:
            raise UsageError(
                "no AWS credentials found (environment, ~/.aws/credentials, ~/.aws/config); "
                "configure some, or pass --no-sign-request for a public bucket"
            )
        signer = Signer(credentials, region)
    if endpoint_url:
        endpoint_url = endpoint_url.rstrip("/")
        try:
            parsed = parse_url(endpoint_url + "/")
        except Exception:
            raise UsageError(f"--endpoint-url {endpoint_url!r}: not an http(s) URL") from None
        base_path = parsed.target.decode("ascii").rstrip("/")
        path = f"{base_path}/{quote(bucket, safe='')}"
        base = f"{parsed.scheme}://{parsed.host_header.decode('ascii')}"
        return Target(bucket, base, parsed.host_header.decode("ascii"), path, region, signer)
    if "." in bucket:
        host = f"s3.{region}.amazonaws.com"
        path = f"/{bucket}"
    else:
        host = f"{bucket}.s3.{region}.amazonaws.com"
        path = "/"
    return Target(bucket, f"https://{host}", host, path, region, signer)
