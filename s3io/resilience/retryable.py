"""The one place that decides what is retried, and how errors from the wire become typed errors.

Retried: connection failures, timeouts of a phase, truncated bodies, answers that contradict the request (a wrong
Content-Range, malformed XML: a bad node or proxy, ``ProtocolError``), HTTP 408/429/500/502/503/504 and the
S3 codes SlowDown, InternalError, RequestTimeout, ServiceUnavailable (also inside a 200 response), a body whose bytes
do not have the checksum the store states (``ChecksumMismatch``, on a read) or an upload the store says arrived
other than its checksum (BadDigest and its kin: damaged on the way, so sent again), and a 409
ConditionalRequestConflict (two conditional writes of one key at once: S3 says to retry; the condition is judged
again, so the loser then gets its 412). A listing that loops (``ListingLoop``) is not retried.
Never retried: 400, 403, 404, 412 and the rest. ExpiredToken: refresh credentials once, then retry. A 400
with no error code (a HEAD's answer has no body, so S3 cannot say ExpiredToken there) is treated the same
way: one refresh and one more attempt, then the error; unless the answer named the bucket's region (a wrong-region
answer the client did not follow): then the error says so, and nothing is refreshed.

Clock skew (S3 refuses requests signed more than 15 minutes off its clock: RequestTimeTooSkewed, or a bare 403 to
a HEAD): ``clock_correction`` measures the server's clock from the answer's Date, as the AWS SDKs do, so the client
signs again with it; an error that skew still explains says so and names the fix.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from s3io import errors
from s3io.resilience.deadline import SLOW_SEND

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
RETRYABLE_CODES = frozenset(
    {"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable", "Throttling", "ThrottlingException"}
)
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"})
EXPIRED_CREDENTIAL_CODES = frozenset({"ExpiredToken", "TokenRefreshRequired", "ExpiredTokenException"})
NO_CODE_400 = "400"  # the code a 400 gets when its answer names none (always so for HEAD)
# An upload whose bytes reached the store other than their checksum (Content-MD5, x-amz-checksum-*, the SigV4
# payload hash) says: damaged on the way, so worth sending again.
INTEGRITY_CODES = frozenset({"BadDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch"})
CONDITIONAL_CONFLICT = "ConditionalRequestConflict"  # 409: a conditional write raced another on the same key
CLOCK_SKEWED = "RequestTimeTooSkewed"
CLOCK_SKEW_CODES = frozenset({CLOCK_SKEWED, "RequestExpired", "RequestInTheFuture"})
SKEW_THRESHOLD_SECONDS = 240  # the AWS SDKs' threshold for correcting (S3 refuses at 15 minutes)
MAX_SKEW_ROUND_TRIP = 900  # an answer slower than this says nothing reliable about the server's clock
# How the client's message names a region it was told but did not follow (s3io.s3.client builds it).
_NAMED_REGION = re.compile(r"the bucket is in ([a-z0-9-]{1,64}); pass region=")
PROXY_AUTHENTICATION_REQUIRED = 407
PROXY_CREDENTIALS_NEEDED = (
    "the forward proxy refused the request: 407 Proxy Authentication Required; give its credentials in the proxy "
    "URL (http://user:password@host:port: the proxy option, or HTTPS_PROXY / HTTP_PROXY)"
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an error is worth another attempt, and the reason counted in the metrics."""

    retry: bool
    reason: str
    refresh_credentials: bool = False
    is_timeout: bool = False


NO_RETRY = Verdict(False, "not_retryable")


def classify(exc: BaseException) -> Verdict:
    """Decide retryability from a typed s3io error (wire errors are converted by ``from_wire`` first)."""
    if isinstance(exc, errors.DeadlineExceeded):
        if exc.phase in ("operation", SLOW_SEND):  # a slow part goes back to its writer, to go again with fewer
            return NO_RETRY
        return Verdict(True, f"timeout:{exc.phase}", is_timeout=True)
    if isinstance(exc, errors.Truncated):
        return Verdict(True, "truncated")
    if isinstance(exc, errors.ListingLoop):
        return NO_RETRY
    if isinstance(exc, errors.ChecksumMismatch):
        return Verdict(True, "integrity")
    if isinstance(exc, errors.ProtocolError):
        return Verdict(True, "protocol")
    if isinstance(exc, errors.TransportError):
        return Verdict(True, "connection")
    if isinstance(exc, errors.Throttled):
        return Verdict(True, "throttled")
    if isinstance(exc, errors.ServerError):
        return Verdict(True, "server_error")
    if isinstance(exc, errors.RequestError):
        if exc.code in EXPIRED_CREDENTIAL_CODES:
            return Verdict(True, "expired_credentials", refresh_credentials=True)
        if exc.status == 400 and exc.code == NO_CODE_400 and not _NAMED_REGION.search(exc.message):
            return Verdict(True, "unexplained_400", refresh_credentials=True)
        if exc.status in RETRYABLE_STATUS or exc.code in RETRYABLE_CODES:
            return Verdict(True, "request_timeout")
        if exc.code in INTEGRITY_CODES:
            return Verdict(True, "integrity")
        if exc.status == 409 and exc.code == CONDITIONAL_CONFLICT:
            return Verdict(True, "conditional_conflict")
    return NO_RETRY


def clock_correction(
    status: int,
    code: str | None,
    server_date: str | None,
    age: str | None,
    sent: float,
    received: float,
    offset: float,
) -> float | None:
    """The offset (seconds to add to this machine's clock) to sign with after a refusal that clock skew explains,
    or None: the answer is a 403 or names RequestTimeTooSkewed, and its Date is more than SKEW_THRESHOLD_SECONDS
    off this machine's clock as already corrected by ``offset``. The server's time is taken at the middle of the
    round trip, as NTP does; a cached answer (``Age``) or one slower than MAX_SKEW_ROUND_TRIP is not used."""
    if status != 403 and code not in CLOCK_SKEW_CODES:
        return None
    if age is not None or not 0 <= received - sent <= MAX_SKEW_ROUND_TRIP:
        return None
    server = _http_date(server_date)
    if server is None:
        return None
    candidate = server - (sent + received) / 2
    return candidate if abs(candidate - offset) > SKEW_THRESHOLD_SECONDS else None


def error_for_status(
    status: int,
    code: str | None,
    message: str | None,
    *,
    server_date: str | None = None,
    clock_offset: float = 0.0,
    foreign: str | None = None,
    endpoint: str | None = None,
    **context: object,
) -> errors.S3IOError:
    """The typed error for an HTTP error response (or an <Error> inside a 200); ``server_date``: the answer's Date
    header, which tells a 403 caused by the clock (this machine's, plus ``clock_offset``, the correction the
    client signs with) from others. ``foreign``: what the answer's body was when it is not S3's error document
    (``foreign_answer``): a 4xx of that kind comes from another server than S3, and says so (EndpointNotS3)."""
    kwargs = dict(context, status=status, code=code)
    if status == PROXY_AUTHENTICATION_REQUIRED:  # the forward proxy's answer, not S3's: no retry mends it
        return errors.InvalidConfig(PROXY_CREDENTIALS_NEEDED, **kwargs)
    if foreign is not None and 400 <= status < 500:
        return errors.EndpointNotS3(
            f"the endpoint {endpoint or ''} answered HTTP {status} with {foreign}, not with S3's XML error: it is not "
            "an S3 endpoint (or a proxy in between refused the request); check the endpoint URL and port",
            **kwargs,
        )
    text = (message or f"HTTP {status}") + _fix_hint(code) + _clock_hint(status, code, server_date, clock_offset)
    if code in THROTTLE_CODES or status in (429, 503) or code == "ServiceUnavailable":
        return errors.Throttled(f"throttled: {text}", **kwargs)
    if status in (500, 502, 504) or code in ("InternalError",):
        return errors.ServerError(f"server error: {text}", **kwargs)
    if status == 404:
        return errors.NotFound(f"not found: {text}", **kwargs)
    if status == 403 and code not in EXPIRED_CREDENTIAL_CODES:
        return errors.AccessDenied(f"access denied: {text}", **kwargs)
    if status == 412:
        return errors.PreconditionFailed(f"precondition failed: {text}", **kwargs)
    if status == 400 and code == NO_CODE_400 and not _NAMED_REGION.search(text):
        text += (
            " with no error code (S3 sends none with a HEAD); the usual cause is an expired or invalid session "
            "token (ExpiredToken): s3io refreshes credentials once before giving up, so renew them at their source; "
            "or the object is encrypted with SSE-C and the request did not carry its key (give sseCustomerKey)"
        )
    return errors.RequestError(f"request failed: {text}", **kwargs)


# What to check for the S3 error codes a person meets when the settings are wrong (appended to S3's message).
_FIXES = {
    "NoSuchBucket": "check the bucket name, the endpoint and the account",
    "InvalidAccessKeyId": "the store knows no such access key: check accessKeyId (fs.s3a.access.key, "
    "AWS_ACCESS_KEY_ID) and that the endpoint is the store the key belongs to",
    "SignatureDoesNotMatch": "the secret key does not match the access key: check secretAccessKey "
    "(fs.s3a.secret.key, AWS_SECRET_ACCESS_KEY)",
    "AccessDenied": "the credentials may not do this: check the bucket policy and the credentials' permissions",
    "InvalidToken": "the session token is not valid: check sessionToken (fs.s3a.session.token, AWS_SESSION_TOKEN)",
}


def _fix_hint(code: str | None) -> str:
    fix = _FIXES.get(code or "")
    return f" ({fix})" if fix else ""


def foreign_answer(headers: Mapping[str, str], body: bytes) -> str | None:
    """What an error answer's body is, in a few words, when it has one and it is not an S3 XML document (S3 answers
    every error to a request with a body in XML; a HEAD's answer has none, so nothing can be told from it)."""
    text = body.lstrip()[:200]
    if not text or text.startswith(b"<?xml") or text.startswith(b"<Error"):
        return None
    kind = headers.get("Content-Type") or "no Content-Type"
    shown = " ".join(text.decode("utf-8", "replace").split())[:60]
    return f"a {kind} body ({shown!r})"


def _clock_hint(status: int, code: str | None, server_date: str | None, offset: float) -> str:
    """The words that name clock skew as the cause of an error (and the fix), or "" when it is not the cause."""
    server = _http_date(server_date) if status == 403 or code in CLOCK_SKEW_CODES else None
    skew = None if server is None else server - (time.time() + offset)
    if skew is not None and abs(skew) > SKEW_THRESHOLD_SECONDS:
        where = "behind" if skew > 0 else "ahead of"
        off = f"this machine's clock is {abs(skew):.0f} s {where} the server's"
    elif code == CLOCK_SKEWED:
        off = "this machine's clock is off the server's (RequestTimeTooSkewed)"
    else:
        return ""
    return f"; {off}; S3 refuses requests signed more than 15 minutes off; fix the clock (NTP)"


def _http_date(value: str | None) -> float | None:
    """An HTTP Date header as a POSIX timestamp, or None if missing or unreadable."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=datetime.UTC)).timestamp()


def _kernel_timeout(exc: BaseException) -> OSError | None:
    """The socket-level ETIMEDOUT behind an exception, if there is one."""
    seen = 0
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while cause is not None and seen < 8:
        if isinstance(cause, OSError) and cause.errno == errno.ETIMEDOUT:
            return cause
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return None


def got_answer(exc: BaseException) -> bool:
    """Whether an attempt that failed with ``exc`` had an answer from the server (a status, or an answer that
    contradicts the request): the endpoint was reached."""
    return isinstance(exc, errors.S3IOError) and (
        exc.status is not None or isinstance(exc, errors.ProtocolError | errors.ChecksumMismatch | errors.Truncated)
    )


def unreached_proxy(exc: BaseException) -> str | None:
    """``host:port`` of the forward proxy a failed attempt could not connect to (aiohttp's
    ClientProxyConnectionError in its causes), else None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, aiohttp.ClientProxyConnectionError):
            return f"{cause.host}:{cause.port}"
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return None


def answered_without_http(exc: errors.S3IOError) -> bool:
    """Whether a failed attempt got bytes that are not HTTP (aiohttp's parser refused them): a server, but not S3."""
    return isinstance(exc, errors.TransportError) and isinstance(
        exc.__cause__ or exc.cause, aiohttp.ClientResponseError | HttpProcessingError
    )


def no_answer_reason(exc: errors.S3IOError) -> str:
    """Why an attempt got no answer, in a few words: "connection refused", a DNS error, "no first byte in 10 s"."""
    if isinstance(exc, errors.DeadlineExceeded):
        if exc.phase == "send":
            return "the request body made no progress within the stall timeout"
        return f"no {exc.phase.replace('_', ' ')} within its timeout"
    cause = exc.__cause__ or exc.cause
    os_error = getattr(cause, "os_error", cause)
    if isinstance(os_error, socket.gaierror):
        return f"the host name did not resolve: {os_error.strerror}"
    if isinstance(os_error, OSError) and os_error.errno:
        return os.strerror(os_error.errno).lower()
    return str(cause or exc.message)


def from_wire(exc: BaseException, **context: object) -> BaseException:
    """Convert an aiohttp/socket exception raised during an attempt into a typed s3io error."""
    if isinstance(exc, errors.S3IOError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        kernel = _kernel_timeout(exc)
        if kernel is not None:  # aiohttp relabels a socket's ETIMEDOUT (TCP_USER_TIMEOUT, keepalive) as connect
            return errors.TransportError("the kernel gave up on the connection (ETIMEDOUT)", cause=kernel, **context)
        return errors.DeadlineExceeded("connect timed out", phase="connect", cause=exc, **context)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # no retry mends a certificate
        return errors.InvalidConfig(
            f"TLS certificate of {exc.host} failed verification ({exc.certificate_error}); check the endpoint "
            "URL, or point caBundle (AWS_CA_BUNDLE, the profile's ca_bundle, --ca-bundle; or SSL_CERT_FILE for the "
            "default trust store) at the CA bundle that signed it",
            cause=exc,
            **context,
        )
    if isinstance(exc, aiohttp.ClientHttpProxyError):  # the proxy's answer to CONNECT
        if exc.status == PROXY_AUTHENTICATION_REQUIRED:
            return errors.InvalidConfig(PROXY_CREDENTIALS_NEEDED, cause=exc, **context)
        return errors.TransportError(
            f"the forward proxy refused to open a tunnel to the store ({exc.status} {exc.message})",
            cause=exc,
            **context,
        )
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return errors.TransportError("could not connect to the forward proxy", cause=exc, **context)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return errors.Truncated("response body ended early", cause=exc, **context)
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientOSError | ConnectionError | OSError):
        return errors.TransportError("connection failed", cause=exc, **context)
    if isinstance(exc, aiohttp.ClientResponseError | HttpProcessingError):  # aiohttp's parser refused the answer
        return errors.TransportError("malformed HTTP response", cause=exc, **context)
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return errors.DeadlineExceeded("timed out", phase="attempt", cause=exc, **context)
    if isinstance(exc, aiohttp.ClientError):
        return errors.TransportError("HTTP client error", cause=exc, **context)
    return exc
