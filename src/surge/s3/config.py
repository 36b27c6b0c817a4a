"""Where to send S3 requests and how to sign them: endpoint, region, credentials.

Credentials come from the standard chain, as the AWS CLI finds them. botocore
implements that chain (environment, shared credentials and config files with
profiles, SSO, assume-role, container and instance metadata) and is the field's
reference, so surge asks it rather than re-implementing the chain. Importing
botocore costs ~0.1-0.2 s, so the commonest case - keys in the environment and
no ``--profile`` - is read directly, in the same order of precedence botocore
uses (the environment comes first unless a profile is named).

The endpoint (:func:`resolve_endpoint`) is found as botocore finds it: the
flag, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's ``[services]``
section, the profile's ``endpoint_url``.

Addressing: path-style (``http://host:port/bucket``) whenever an endpoint
is given or configured, as S3-compatible servers (MinIO, Ceph, ...) expect; virtual-hosted
(``https://bucket.s3.region.amazonaws.com``) for AWS itself, as AWS requires
for new buckets, except for bucket names with dots (they break the TLS name).
"""

from __future__ import annotations

import configparser
import json
import os
import re
from dataclasses import dataclass, replace
from urllib.parse import quote

from surge.errors import UsageError
from surge.extras import install_hint
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
    #: AWS itself (no endpoint URL): the host names the region.
    aws: bool = False

    def in_region(self, region: str) -> Target:
        """The same bucket signed for ``region`` - and, on AWS, sent to that
        region's host - as botocore re-resolves a redirected request."""
        signer = None if self.signer is None else Signer(self.signer.credentials, region)
        if not self.aws:
            return replace(self, region=region, signer=signer)
        host, path = _aws_host(self.bucket, region)
        return Target(self.bucket, f"https://{host}", host, path, region, signer, aws=True)


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
    import botocore.exceptions

    try:
        found = session.get_credentials()
        if found is None:
            return None
        # Frozen once per listing: refreshable credentials (SSO, assume-role) last
        # 15 minutes at the least, far longer than a listing's few seconds.
        frozen = found.get_frozen_credentials()
    except botocore.exceptions.ProfileNotFound:
        raise UsageError(_no_such_profile(profile)) from None
    except (botocore.exceptions.BotoCoreError, OSError, ValueError) as e:
        # Partial keys, a source_profile that is not there, a credential_process
        # that is missing, fails or prints no JSON: the user's configuration.
        raise UsageError(f"AWS credentials ({_whose(profile)}): {_one_line(e)}") from None
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


def _whose(profile: str | None) -> str:
    """The profile as the user named it: the flag, or the variable that chose it."""
    env = os.environ
    if profile is not None:
        return f"--profile {profile}"
    if env.get("AWS_PROFILE"):
        return f"AWS_PROFILE={env['AWS_PROFILE']}"
    if env.get("AWS_DEFAULT_PROFILE"):
        return f"AWS_DEFAULT_PROFILE={env['AWS_DEFAULT_PROFILE']}"
    return "profile default"


def _no_such_profile(profile: str | None) -> str:
    return f"{_whose(profile)}: no such profile in the AWS config files"


def _one_line(error: BaseException) -> str:
    """An exception as one short line (a credential_process's stderr may be long)."""
    if isinstance(error, json.JSONDecodeError):
        text = f"the credential_process printed no JSON ({error})"
    elif isinstance(error, OSError) and error.strerror:
        text = f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    else:
        text = str(error) or type(error).__name__
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _profile_name(profile: str | None) -> str:
    env = os.environ
    return profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"


def _config_file() -> configparser.RawConfigParser:
    """The shared config file (AWS_CONFIG_FILE, else ~/.aws/config), read with
    configparser rather than through a botocore session: importing botocore
    and building a session cost ~0.15 s of CPU, two thirds of a 7,500-object
    listing's whole client CPU. Unreadable: as if absent, like botocore."""
    path = _config_path()
    config = configparser.RawConfigParser()
    try:
        config.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        config = configparser.RawConfigParser()
    return config


def _config_path() -> str:
    env = os.environ
    return env.get("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")


def _section(name: str) -> str:
    return "default" if name == "default" else f"profile {name}"


def resolve_region(region: str | None, profile: str | None) -> str:
    """The flag, else AWS_REGION / AWS_DEFAULT_REGION, else the profile's
    ``region`` in the config file, else us-east-1.

    The environment comes before the profile even when a profile is named:
    botocore reads ``region`` from AWS_DEFAULT_REGION first and the profile
    second (AWS_REGION is the AWS CLI v2's and the other SDKs' name)."""
    if region:
        return region
    env = os.environ
    if env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"):
        return env.get("AWS_REGION") or env["AWS_DEFAULT_REGION"]
    config = _config_file()
    section = _section(_profile_name(profile))
    found = config.get(section, "region", fallback=None)
    if found:
        return found.strip()
    if profile is not None and not config.has_section(section):
        _botocore_session(profile)  # a profile may live in the credentials file only
    return "us-east-1"


#: The AWS CLI's defaults (``cli_connect_timeout``, ``cli_read_timeout``): 60 s each.
DEFAULT_CONNECT_TIMEOUT = 60.0
DEFAULT_READ_TIMEOUT = 60.0


def resolve_timeouts(
    connect: float | None, read: float | None, profile: str | None
) -> tuple[float | None, float | None]:
    """The connect and read (idle) timeouts, in seconds: each the flag, else
    the profile's ``cli_connect_timeout`` / ``cli_read_timeout`` in the config
    file (the AWS CLI's settings), else 60 s as the AWS CLI's.  0 means none,
    as for the AWS CLI (the request's whole ``max_time`` still bounds it); None
    in the answer says so.  A value that is no number of seconds is a
    :class:`UsageError` naming the file and the setting."""
    config: configparser.RawConfigParser | None = None
    found: list[float | None] = []
    for given, name, default in (
        (connect, "cli_connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        (read, "cli_read_timeout", DEFAULT_READ_TIMEOUT),
    ):
        value = given
        if value is None:
            if config is None:
                config = _config_file()
            text = config.get(_section(_profile_name(profile)), name, fallback=None)
            if text is not None and text.strip():
                try:
                    value = float(text.strip())
                except ValueError:
                    value = -1.0
                if not 0 <= value < float("inf"):
                    raise UsageError(
                        f"{_config_path()}: [{_section(_profile_name(profile))}] {name} = "
                        f"{text.strip()!r}: expected a number of seconds (0: no limit)"
                    )
        if value is None:
            value = default
        if not 0 <= value < float("inf"):
            raise UsageError(f"a timeout must be 0 or more seconds (0: none), not {value!r}")
        found.append(float(value) or None)
    return found[0], found[1]


def resolve_endpoint(endpoint_url: str | None, profile: str | None) -> str | None:
    """The endpoint, in botocore's order (ConfiguredEndpointProvider): the flag,
    AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the ``s3`` entry of the profile's
    ``[services NAME]`` section, the profile's own ``endpoint_url``; None: AWS.

    AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true (or the profile's
    ``ignore_configured_endpoint_urls``) leaves only the flag, as in botocore.
    Without this, keys meant for a local server were signed and sent to AWS."""
    if endpoint_url:
        return endpoint_url
    env = os.environ
    config = _config_file()
    section = _section(_profile_name(profile))
    ignore = env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or config.get(
        section, "ignore_configured_endpoint_urls", fallback=None
    )
    if ignore and ignore.strip().lower() == "true":
        return None
    found = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if found:
        return found
    services = config.get(section, "services", fallback=None)
    if services:
        services_section = f"services {services.strip()}"
        if not config.has_section(services_section):
            raise UsageError(
                f"the AWS config profile [{section}] names services {services.strip()!r}, "
                f"but there is no [{services_section}] section"
            )
        # botocore's nested form: "s3 =" then indented "endpoint_url = ..." lines
        nested = config.get(services_section, "s3", fallback="")
        for line in nested.splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "endpoint_url" and value.strip():
                return value.strip()
    found = config.get(section, "endpoint_url", fallback=None)
    return found.strip() if found else None


def _botocore_session(profile: str | None):  # type: ignore[no-untyped-def]
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:  # pragma: no cover - depends on the environment
        raise UsageError(
            f"reading AWS profiles needs botocore: {install_hint('s3')}, "
            "or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        ) from None
    try:
        session = botocore.session.Session(profile=profile)
        session.get_scoped_config()  # raises ProfileNotFound now, not later
    except botocore.exceptions.ProfileNotFound:
        raise UsageError(_no_such_profile(profile)) from None
    return session


#: The regions buckets were found in (by a redirect: surge.s3.region), per
#: endpoint and bucket, for the rest of the process - as botocore's redirector
#: keeps its cache for the client's life.  A few entries: one per bucket used.
_regions: dict[tuple[str, str], str] = {}


def _where(target: Target) -> tuple[str, str]:
    return ("" if target.aws else target.base_url, target.bucket)


def remember_region(target: Target, region: str) -> Target:
    """``target`` redirected to ``region``, which later targets of the bucket
    start from (:func:`followed`)."""
    _regions[_where(target)] = region
    return target.in_region(region)


def followed(target: Target) -> Target:
    """``target``, or the same bucket in the region a redirect found it in:
    a dictionary lookup, cheap enough for every request."""
    region = _regions.get(_where(target))
    if region is None or region == target.region:
        return target
    return target.in_region(region)


def make_target(
    bucket: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    no_sign_request: bool = False,
    credentials: Credentials | None = None,
) -> Target:
    """Resolve the endpoint, the region and (unless anonymous) the credentials.

    ``bucket`` "" is the service itself (ListBuckets): the endpoint's root, or
    ``s3.<region>.amazonaws.com``."""
    region = resolve_region(region, profile)
    endpoint_url = resolve_endpoint(endpoint_url, profile)
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
            raise UsageError(f"endpoint URL {endpoint_url!r}: not an http(s) URL") from None
        base_path = parsed.target.decode("ascii").rstrip("/")
        path = f"{base_path}/{quote(bucket, safe='')}" if bucket else f"{base_path}/"
        base = f"{parsed.scheme}://{parsed.host_header.decode('ascii')}"
        host = parsed.host_header.decode("ascii")
        return followed(Target(bucket, base, host, path, region, signer))
    host, path = _aws_host(bucket, region)
    return followed(Target(bucket, f"https://{host}", host, path, region, signer, aws=True))


def _aws_host(bucket: str, region: str) -> tuple[str, str]:
    """AWS's host and the bucket's path: virtual-hosted, but for the service
    itself and for names with dots (they break the TLS name)."""
    if not bucket:
        return f"s3.{region}.amazonaws.com", "/"
    if "." in bucket:
        return f"s3.{region}.amazonaws.com", f"/{bucket}"
    return f"{bucket}.s3.{region}.amazonaws.com", "/"
