"""AWS Signature Version 4 for S3 requests: a pure function of its inputs.

Sans-I/O like h11: no clock is read here (the caller passes the time), no
request is sent, so every case is a plain unit test against botocore's own
signer (``tests/s3/test_sigv4.py``).

Why not botocore's signer: it works on ``AWSRequest`` objects, re-parses the
URL and re-sorts the query on every call, which costs more than a listing page's
share of the work should; what S3 needs is the short recipe below.  One signer
for every request surge sends: the listing's bare GETs, and an object's HEAD,
GET, PUT and multipart calls with their ``x-amz-*`` headers and payload hash.
The signing key changes once a day per region, so it is derived once and kept.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple
from urllib.parse import quote

#: sha256 of the empty payload: a GET's or a HEAD's, without a body.
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#: The payload hash of a body not hashed into the signature (S3 accepts it;
#: the body's integrity is then Content-MD5's to check).
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
ALGORITHM = "AWS4-HMAC-SHA256"


class Credentials(NamedTuple):
    access_key: str
    secret_key: str
    token: str | None = None


def uri_encode(text: str) -> str:
    """S3's URI encoding: every byte but the unreserved A-Z a-z 0-9 - _ . ~ is
    %XX (UTF-8; a space is %20, never +), as the SigV4 canonical query wants."""
    return quote(text, safe="-_.~")


def object_path(bucket_path: str, key: str) -> str:
    """The request path of ``key`` under ``bucket_path`` (``/bucket`` path-style,
    ``/`` virtual-hosted) - sent on the wire and signed as the canonical URI,
    the same string: the one place a key becomes a path.

    A key is opaque bytes: nothing in it is normalised, resolved or collapsed.
    Each byte but the unreserved A-Z a-z 0-9 - _ . ~ and ``/`` is %XX of its
    UTF-8 (a space %20, a ``+`` %2B, a ``%`` %25, a control character %0A...;
    no Unicode normalisation: NFC and NFD are two keys); ``.`` and ``..``
    segments, ``//`` and a leading or trailing ``/`` stay as they are.  S3 is
    SigV4's documented exception to URI normalisation: it signs the path as
    sent (botocore's S3 signer does not normalise either), and the HTTP client
    sends every path as given, resolving no dot segment (``S/../V/k`` would
    otherwise be bucket V's key)."""
    return bucket_path.rstrip("/") + "/" + quote(key, safe="/-_.~")


def canonical_query(params: dict[str, str]) -> str:
    """The query string in canonical form: encoded names and values, sorted by name.

    surge sends the query exactly as signed, so the server's canonical form and
    ours cannot disagree about ordering or escaping."""
    return "&".join(f"{uri_encode(k)}={uri_encode(v)}" for k, v in sorted(params.items()))


class Signer:
    """Signs requests for one set of credentials, one region, service ``s3``."""

    def __init__(self, credentials: Credentials, region: str, service: str = "s3") -> None:
        self.credentials = credentials
        self.region = region
        self.service = service
        self._key_day = ""
        self._key = b""

    def signing_key(self, day: str) -> bytes:
        if day != self._key_day:
            key = ("AWS4" + self.credentials.secret_key).encode()
            for part in (day, self.region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._key, self._key_day = key, day
        return self._key

    def sign(
        self,
        method: str,
        host: str,
        path: str,
        query: str,
        now: datetime,
        *,
        headers: Sequence[tuple[str, str]] = (),
        payload_hash: str = EMPTY_SHA256,
    ) -> list[tuple[str, str]]:
        """The headers that authenticate ``method host path?query`` at ``now`` (UTC).

        ``host`` is the Host header exactly as sent (with a non-default port);
        ``path`` is already URI-encoded; ``query`` is :func:`canonical_query`'s.
        ``headers``: more headers to sign and send (lower-case names), as S3
        wants every ``x-amz-*`` header sent to be signed (``content-md5`` may be
        signed too); ``payload_hash``: the body's SHA-256 (hex), or
        :data:`UNSIGNED_PAYLOAD`.  Returned: every header to send but Host
        (the client's to send), sorted by name, then Authorization.
        """
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        signed_headers = [
            ("host", host),
            ("x-amz-content-sha256", payload_hash),
            ("x-amz-date", amz_date),
            *headers,
        ]
        token = self.credentials.token
        if token:
            signed_headers.append(("x-amz-security-token", token))
        signed_headers.sort()
        signed = ";".join(name for name, _ in signed_headers)
        signature = self._signature(
            method, path, query, signed_headers, payload_hash, amz_date, signed
        )
        authorization = (
            f"{ALGORITHM} Credential={self.credentials.access_key}/{self.scope(day)}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        out = [(name, value) for name, value in signed_headers if name != "host"]
        out.append(("Authorization", authorization))
        return out

    def presign(self, method: str, host: str, path: str, now: datetime, expires: int) -> str:
        """The query string that authenticates ``method host path`` from
        ``now`` (UTC) for ``expires`` seconds, no header needed: SigV4 query
        signing, as botocore's presigned URLs (S3SigV4QueryAuth: only Host
        signed, the payload UNSIGNED-PAYLOAD, a session token in the query).
        ``path`` is already URI-encoded (:func:`object_path`)."""
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        params = {
            "X-Amz-Algorithm": ALGORITHM,
            "X-Amz-Credential": f"{self.credentials.access_key}/{self.scope(day)}",
            "X-Amz-Date": amz_date,
            "X-Amz-Expires": str(expires),
            "X-Amz-SignedHeaders": "host",
        }
        if self.credentials.token:
            params["X-Amz-Security-Token"] = self.credentials.token
        query = canonical_query(params)
        signature = self._signature(
            method, path, query, [("host", host)], UNSIGNED_PAYLOAD, amz_date, "host"
        )
        return f"{query}&X-Amz-Signature={signature}"

    def scope(self, day: str) -> str:
        return f"{day}/{self.region}/{self.service}/aws4_request"

    def _signature(
        self,
        method: str,
        path: str,
        query: str,
        headers: Sequence[tuple[str, str]],
        payload_hash: str,
        amz_date: str,
        signed: str,
    ) -> str:
        """The signature (hex) of the canonical request these make."""
        canonical = "\n".join(
            [
                method,
                path,
                query,
                "".join(f"{name}:{_trimmed(value)}\n" for name, value in headers),
                signed,
                payload_hash,
            ]
        )
        day = amz_date[:8]
        to_sign = "\n".join(
            [ALGORITHM, amz_date, self.scope(day), hashlib.sha256(canonical.encode()).hexdigest()]
        )
        return hmac.new(self.signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()


def _trimmed(value: str) -> str:
    """A header value in canonical form: outer spaces trimmed, inner runs of
    spaces made one (SigV4's Trimall)."""
    value = value.strip()
    return " ".join(value.split()) if "  " in value else value
