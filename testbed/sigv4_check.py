"""A strict front for the test S3 server: recompute every request's SigV4 signature as S3 does, refuse mismatches.

moto accepts any signature, so a client that signs the wrong bytes (a header added after signing, a re-sent
``authorization`` header, a path encoded twice) passes every test against it and fails on real S3. This WSGI
middleware sits in front of moto's app and checks what S3 checks, from the request as it arrived:

- the ``Authorization`` header's form, the credential scope (date, region, ``s3``, ``aws4_request``);
- the access key is known (the fake test key, or keys moto's IAM or STS handed out), else InvalidAccessKeyId;
- ``host`` and every ``x-amz-*`` header present are signed (S3's AccessDenied "headers not signed");
- ``x-amz-date`` is within 15 minutes of the server's clock (RequestTimeTooSkewed), and its day is the scope's;
- ``x-amz-content-sha256`` is present and, unless UNSIGNED-PAYLOAD or a streaming form, the body's hash;
- the scope's region is the bucket's region (else 400 AuthorizationHeaderMalformed with x-amz-bucket-region,
  as S3 answers a request signed for the wrong region);
- the signature recomputed over the canonical request (S3's URI encoding of the decoded path, the sorted
  canonical query, the signed headers' values as received) equals the one sent, else SignatureDoesNotMatch.

Requests without an ``Authorization`` header (anonymous) are passed through. Presigned URLs (query
authentication) are checked the same way. Every refusal is recorded in ``rejections`` so a test session can
assert that nothing it sent was refused.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import io
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

MAX_SKEW_SECONDS = 15 * 60
STREAMING_PAYLOADS = frozenset(
    {
        "UNSIGNED-PAYLOAD",
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    }
)
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*SignedHeaders=(?P<signed>[^,\s]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class Rejection:
    """One refused request: what S3 would have answered, and why."""

    method: str
    path: str
    status: int
    code: str
    reason: str

    @property
    def wrong_region(self) -> bool:
        """A request signed for another region than the bucket's: S3's redirect answer, not a signing error."""
        return self.code == "AuthorizationHeaderMalformed" and "expecting" in self.reason

    @property
    def body_cut(self) -> bool:
        """The sender went away mid-body (a killed process): S3 answers IncompleteBody to no one."""
        return self.code == "IncompleteBody"


class SignatureRefused(Exception):
    """Raised inside the check; becomes the S3 error answer."""

    def __init__(self, status: int, code: str, reason: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.reason = reason
        self.headers = tuple(headers)


class SigV4CheckingApp:
    """WSGI middleware: verifies SigV4 like S3, then calls ``app``; refused requests get S3's error answer."""

    def __init__(
        self,
        app: Callable[[Environ, StartResponse], Iterable[bytes]],
        secrets: Mapping[str, str],
        *,
        secret_lookup: Callable[[str], str | None] | None = None,
        bucket_region: Callable[[str], str | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._secrets = dict(secrets)
        self._secret_lookup = secret_lookup
        self._bucket_region = bucket_region
        self.clock = clock
        self._lock = threading.Lock()
        self.rejections: list[Rejection] = []
        self.checked = 0

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        body, cut = _read_body(environ)
        try:
            if cut:
                raise SignatureRefused(400, "IncompleteBody", "the body ended before its Content-Length")
            self._check(environ, body)
        except SignatureRefused as refused:
            with self._lock:
                self.rejections.append(
                    Rejection(
                        environ["REQUEST_METHOD"], _raw_path(environ), refused.status, refused.code, refused.reason
                    )
                )
            return _error(environ, start_response, refused)
        return self._app(environ, start_response)

    def take_rejections(self) -> list[Rejection]:
        """The refusals since the last call, and forget them."""
        with self._lock:
            taken, self.rejections = self.rejections, []
        return taken

    # ------------------------------------------------------------------------------------------- the check

    def _check(self, environ: Environ, body: bytes) -> None:
        query_pairs = _query_pairs(environ.get("QUERY_STRING", ""))
        query = dict(query_pairs)
        authorization = environ.get("HTTP_AUTHORIZATION")
        if authorization is None and "X-Amz-Signature" not in query:
            return  # anonymous: moto decides
        with self._lock:
            self.checked += 1
        if authorization is not None:
            match = _AUTH.match(authorization.strip())
            if match is None:
                raise SignatureRefused(400, "AuthorizationHeaderMalformed", f"malformed Authorization: {authorization}")
            credential, signed, signature = match["credential"], match["signed"], match["signature"]
            if credential.count("/") == 4 and credential.split("/")[3] != "s3":
                return  # another service moto also serves (STS, IAM): not S3's check
            amz_date = _header(environ, "x-amz-date")
            payload_hash = _header(environ, "x-amz-content-sha256")
            if payload_hash is None:
                raise SignatureRefused(400, "InvalidRequest", "missing x-amz-content-sha256")
            if payload_hash not in STREAMING_PAYLOADS and payload_hash != hashlib.sha256(body).hexdigest():
                raise SignatureRefused(400, "XAmzContentSHA256Mismatch", "x-amz-content-sha256 is not the body's hash")
            canonical_query_pairs = query_pairs
        else:
            credential = query.get("X-Amz-Credential", "")
            signed = query.get("X-Amz-SignedHeaders", "")
            signature = query.get("X-Amz-Signature", "")
            amz_date = query.get("X-Amz-Date")
            payload_hash = "UNSIGNED-PAYLOAD"
            canonical_query_pairs = [(k, v) for k, v in query_pairs if k != "X-Amz-Signature"]
        access_key, _, scope = credential.partition("/")
        scope_parts = scope.split("/")
        if len(scope_parts) == 4 and scope_parts[2] != "s3":
            return  # another service moto also serves (STS, IAM): not S3's check
        if len(scope_parts) != 4 or scope_parts[3] != "aws4_request":
            raise SignatureRefused(400, "AuthorizationHeaderMalformed", f"malformed credential scope {scope!r}")
        scope_date, scope_region = scope_parts[0], scope_parts[1]
        secret = self._secret(access_key)
        if secret is None:
            raise SignatureRefused(403, "InvalidAccessKeyId", f"unknown access key {access_key[:4]}...")
        if amz_date is None:
            raise SignatureRefused(403, "AccessDenied", "no x-amz-date")
        try:
            when = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise SignatureRefused(403, "AccessDenied", f"malformed x-amz-date {amz_date!r}") from None
        if abs(when - self.clock()) > MAX_SKEW_SECONDS:
            raise SignatureRefused(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the server's time is too large.",
            )
        if amz_date[:8] != scope_date:
            raise SignatureRefused(403, "SignatureDoesNotMatch", "x-amz-date's day is not the credential scope's")
        names = signed.split(";")
        if names != sorted(names) or any(n != n.lower() for n in names):
            raise SignatureRefused(403, "SignatureDoesNotMatch", f"SignedHeaders not sorted lower case: {signed}")
        if "host" not in names:
            raise SignatureRefused(403, "AccessDenied", "the host header is not signed")
        unsigned = [n for n in _header_names(environ) if n.startswith("x-amz-") and n not in names]
        if unsigned:
            raise SignatureRefused(
                403, "AccessDenied", f"There were headers present in the request which were not signed: {unsigned}"
            )
        bucket = _bucket_of(environ)
        if bucket and self._bucket_region is not None:
            region = self._bucket_region(bucket)
            if region is not None and region != scope_region:
                raise SignatureRefused(
                    400,
                    "AuthorizationHeaderMalformed",
                    f"The authorization header is malformed; the region '{scope_region}' is wrong; expecting "
                    f"'{region}'",
                    headers=[("x-amz-bucket-region", region)],
                )
        canonical_headers = ""
        for name in names:
            value = _header(environ, name)
            if value is None:
                raise SignatureRefused(403, "SignatureDoesNotMatch", f"signed header {name} is not in the request")
            canonical_headers += f"{name}:{' '.join(value.split())}\n"
        canonical_request = "\n".join(
            [
                environ["REQUEST_METHOD"],
                _canonical_uri(_raw_path(environ)),
                _canonical_query(canonical_query_pairs),
                canonical_headers,
                signed,
                payload_hash,
            ]
        )
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
        )
        key = ("AWS4" + secret).encode()
        for part in (scope_date, scope_region, "s3", "aws4_request"):
            key = hmac.digest(key, part.encode(), "sha256")
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise SignatureRefused(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. "
                f"Canonical request: {canonical_request!r}",
            )

    def _secret(self, access_key: str) -> str | None:
        secret = self._secrets.get(access_key)
        if secret is None and self._secret_lookup is not None:
            secret = self._secret_lookup(access_key)
        return secret


# ----------------------------------------------------------------------------------------- request pieces


def _read_body(environ: Environ) -> tuple[bytes, bool]:
    """Read the whole request body and put it back, so the app below reads the same bytes; and whether it ended before
    its Content-Length (the connection closed mid-body: what arrived is not what was signed)."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b"", False
    length = environ.get("CONTENT_LENGTH")
    if length:
        body = stream.read(int(length))
    elif environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    if body or length:
        environ["CONTENT_LENGTH"] = str(len(body))
    return body, bool(length) and len(body) < int(length)


def _raw_path(environ: Environ) -> str:
    """The path exactly as the request line carried it (werkzeug keeps it in RAW_URI / REQUEST_URI)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        return raw.split("?", 1)[0]
    return quote(environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace"), safe="/")


def _canonical_uri(raw_path: str) -> str:
    """S3's rule: decode the path once, then encode every byte but unreserved characters and '/'."""
    return quote(unquote(raw_path), safe="/~")


def _query_pairs(query_string: str) -> list[tuple[str, str]]:
    pairs = []
    for part in query_string.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((unquote(name), unquote(value)))
    return pairs


def _canonical_query(pairs: list[tuple[str, str]]) -> str:
    encoded = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def _environ_key(name: str) -> str:
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{upper}"


def _header(environ: Environ, name: str) -> str | None:
    return environ.get(_environ_key(name))


def _header_names(environ: Environ) -> list[str]:
    return [key[5:].lower().replace("_", "-") for key in environ if key.startswith("HTTP_")]


def _bucket_of(environ: Environ) -> str | None:
    """The bucket a path-style or virtual-hosted request addresses."""
    host = (environ.get("HTTP_HOST") or "").split(":", 1)[0]
    first = host.split(".", 1)[0]
    if "." in host and not re.fullmatch(r"[0-9.]+", host) and first not in ("s3", "localhost"):
        return first
    path = unquote(_raw_path(environ))
    bucket = path.lstrip("/").split("/", 1)[0]
    return bucket or None


def _error(environ: Environ, start_response: StartResponse, refused: SignatureRefused) -> Iterable[bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{refused.code}</Code><Message>{_escape(refused.reason)}</Message>"
        "<RequestId>sigv4check</RequestId></Error>"
    ).encode()
    head = environ["REQUEST_METHOD"] == "HEAD"
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(0 if head else len(body)))]
    headers.extend(refused.headers)
    reason = {400: "Bad Request", 403: "Forbidden"}.get(refused.status, "Error")
    start_response(f"{refused.status} {reason}", headers)
    return [b""] if head else [body]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -------------------------------------------------------------------------------------- moto's own stores


def moto_secret(access_key: str) -> str | None:
    """The secret of an access key moto's IAM or STS handed out (assumed roles, IAM users), or None."""
    try:
        from moto.iam.models import iam_backends
        from moto.sts.models import sts_backends
    except ImportError:
        return None
    for by_partition in list(sts_backends.values()):
        for backend in list(by_partition.values()):
            for role in list(getattr(backend, "assumed_roles", [])):
                if role.access_key_id == access_key:
                    return role.secret_access_key
    for by_partition in list(iam_backends.values()):
        for backend in list(by_partition.values()):
            for user in list(getattr(backend, "users", {}).values()):
                for key in list(getattr(user, "access_keys", [])):
                    if key.access_key_id == access_key:
                        return key.secret_access_key
    return None


def moto_bucket_region(bucket: str) -> str | None:
    """The region moto created ``bucket`` in, or None if it does not exist (yet)."""
    from moto.s3.models import s3_backends

    for by_partition in list(s3_backends.values()):
        for backend in list(by_partition.values()):
            found = getattr(backend, "buckets", {}).get(bucket)
            if found is not None:
                return found.region_name
    return None
