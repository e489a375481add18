"""SigV4 signing: byte-for-byte what botocore signs, and no secret in any repr or error."""

from __future__ import annotations

import datetime

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from s3io import errors
from s3io.resilience.retryable import error_for_status
from s3io.transport.credentials import Credentials
from s3io.transport.endpoint import resolve_endpoint
from s3io.transport.sigv4 import EMPTY_SHA256, Signer, canonical_query

pytestmark = pytest.mark.timeout(30)


class _FrozenClock(datetime.datetime):
    """botocore reads datetime.datetime.now/utcnow; freeze both at the instant our signer is given."""

    @classmethod
    def utcnow(cls) -> datetime.datetime:
        return datetime.datetime(2023, 11, 14, 22, 13, 20)

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:
        return datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=tz)


@pytest.mark.parametrize(
    ("method", "key", "query", "extra", "token"),
    [
        ("GET", "dir/file with spaces+plus~tilde.parquet", {}, {"range": "bytes=0-99"}, None),
        ("GET", "", {"list-type": "2", "prefix": "a b/", "max-keys": "1000"}, {}, "session-token"),
        ("PUT", "k/\u00fc-unicode", {"partNumber": "3", "uploadId": "abc/def=="}, {"if-none-match": "*"}, None),
    ],
)
def test_sigv4_matches_botocore(
    monkeypatch: pytest.MonkeyPatch, method: str, key: str, query: dict, extra: dict, token: str | None
) -> None:
    endpoint = resolve_endpoint("http://127.0.0.1:9000", "eu-west-1")
    host, path = endpoint.target("bucket", key)
    url = endpoint.url("bucket", key)
    qs = canonical_query(query)
    ours = {"host": host, **extra}
    Signer("AKIDEXAMPLE", "secret/key", token, "eu-west-1").sign(
        method, path, qs, ours, EMPTY_SHA256, now=1_700_000_000.0
    )

    monkeypatch.setattr(botocore.auth.datetime, "datetime", _FrozenClock)
    request = AWSRequest(method=method, url=url + (f"?{qs}" if qs else ""), headers={**extra})
    request.headers["X-Amz-Content-SHA256"] = EMPTY_SHA256
    S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret/key", token), "s3", "eu-west-1").add_auth(request)
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours["authorization"] == request.headers["Authorization"]


def test_secrets_never_in_reprs_or_errors() -> None:
    creds = Credentials("AKIDEXAMPLE", "very-secret-value", "token-value")
    signer = Signer("AKIDEXAMPLE", "very-secret-value", "token-value", "us-east-1")
    for text in (repr(creds), str(creds), repr(signer)):
        assert "very-secret-value" not in text and "token-value" not in text
    err = error_for_status(403, "AccessDenied", "denied", bucket="b", key="k")
    assert isinstance(err, errors.AccessDenied) and "s3://b/k" in str(err)
