"""AWS Signature Version 4 for S3, small and fast: the signing key is derived once per day and region.

Byte-for-byte the same signature as botocore's S3SigV4Auth for the same request (tested against it).
Nothing here logs, and no repr shows a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_ALGORITHM = "AWS4-HMAC-SHA256"


def canonical_query(params: Mapping[str, str] | None) -> str:
    """The query string in SigV4's canonical form (sorted, every value encoded); also sent on the wire."""
    if not params:
        return ""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))


class Signer:
    """Signs requests with one set of credentials for one region; cheap to call per request."""

    __slots__ = (
        "_access_key",
        "_credential",
        "_key",
        "_region",
        "_scope",
        "_scope_date",
        "_second",
        "_secret_key",
        "_stamp",
        "_token",
    )

    def __init__(self, access_key: str, secret_key: str, token: str | None, region: str) -> None:
        self._access_key = access_key
        self._secret_key = secret_key
        self._token = token
        self._region = region
        self._scope_date = ""
        self._key = b""
        self._scope = ""
        self._credential = ""  # "AWS4-HMAC-SHA256 Credential=<access key>/<scope>, SignedHeaders=", per scope
        self._second = -1  # the whole second ``_stamp`` names: requests within one second share the formatting
        self._stamp = ""

    def __repr__(self) -> str:
        return f"Signer(region={self._region!r}, access_key=***)"

    @property
    def region(self) -> str:
        return self._region

    def for_region(self, region: str) -> Signer:
        """The same credentials, signing for ``region`` (a bucket that lives elsewhere)."""
        return Signer(self._access_key, self._secret_key, self._token, region)

    def _signing_key(self, date: str) -> bytes:
        if date != self._scope_date:
            k = hmac.digest(("AWS4" + self._secret_key).encode(), date.encode(), "sha256")
            k = hmac.digest(k, self._region.encode(), "sha256")
            k = hmac.digest(k, b"s3", "sha256")
            self._key = hmac.digest(k, b"aws4_request", "sha256")
            self._scope = f"{date}/{self._region}/s3/aws4_request"
            self._credential = f"{_ALGORITHM} Credential={self._access_key}/{self._scope}, SignedHeaders="
            self._scope_date = date
        return self._key

    def sign(
        self,
        method: str,
        canonical_uri: str,
        query: str,
        headers: dict[str, str],
        payload_hash: str,
        now: float | None = None,
    ) -> None:
        """Add x-amz-date, x-amz-content-sha256, the session token and Authorization to ``headers``.

        ``headers`` must hold lower-case names, including ``host``; all of them are signed.
        """
        second = int(time.time() if now is None else now)
        if second != self._second:
            self._stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
            self._second = second
        stamp = self._stamp
        headers["x-amz-date"] = stamp
        headers["x-amz-content-sha256"] = payload_hash
        if self._token:
            headers["x-amz-security-token"] = self._token
        names = sorted(headers)
        signed = ";".join(names)
        canonical_headers = "".join([f"{n}:{' '.join(str(headers[n]).split())}\n" for n in names])
        request = f"{method}\n{canonical_uri}\n{query}\n{canonical_headers}\n{signed}\n{payload_hash}"
        key = self._signing_key(stamp[:8])
        to_sign = f"{_ALGORITHM}\n{stamp}\n{self._scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
        signature = hmac.digest(key, to_sign.encode(), "sha256").hex()  # C's one-shot HMAC: no hmac.HMAC object
        headers["authorization"] = f"{self._credential}{signed}, Signature={signature}"
