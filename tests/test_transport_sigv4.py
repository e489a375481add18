"""SigV4 signing: byte-for-byte what botocore signs, and no secret in any repr or error."""

from __future__ import annotations

import datetime
import email.utils
import re
import time

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from support.moto_server import FAKE_ACCESS_KEY, MotoServer, S3Endpoint, boto3_client

from s3io import Policy, S3Client, errors
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


@pytest.mark.signature_errors_expected
async def test_a_client_made_after_the_keys_changed_signs_with_the_new_keys(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider chain is kept per process only while the variables that select it are unchanged: a key fixed
    in the environment is used by the next client (as by the next boto3 session)."""
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="k", Body=b"data")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "typo-key")
    async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
        with pytest.raises(errors.AccessDenied, match="unknown access key"):
            await s3.get_object(bucket, "k")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY)
    async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
        assert (await s3.get_object(bucket, "k")).data == b"data"
    rejected = moto_server.front.take_rejections() if moto_server.front else []
    assert [r.code for r in rejected] == ["InvalidAccessKeyId"]


@pytest.mark.signature_errors_expected
async def test_a_request_refused_for_clock_skew_says_so_and_names_the_fix(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str
) -> None:
    """With the server's clock 20 minutes ahead S3 refuses every request (RequestTimeTooSkewed; a HEAD's 403 has no
    body to say so): the error names the clock and NTP, not only 'access denied'."""
    assert moto_server.front is not None
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="k", Body=b"data")
    moto_server.front.clock = lambda: time.time() + 20 * 60
    try:
        async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
            with pytest.raises(errors.AccessDenied, match=r"clock .*15 minutes off; fix the clock \(NTP\)"):
                await s3.get_object(bucket, "k")
            with pytest.raises(errors.AccessDenied, match=r"clock is 1[12]\d\d s behind the server's; .*\(NTP\)"):
                await s3.head_object(bucket, "k")  # no body, no code: the answer's Date tells
    finally:
        moto_server.front.clock = time.time
        moto_server.front.take_rejections()


@pytest.mark.parametrize(("offset", "words"), [(1200, "behind"), (-1200, "ahead of")])
def test_a_403_whose_date_is_far_from_our_clock_names_the_skew(offset: int, words: str) -> None:
    """A HEAD's 403 has no body to name RequestTimeTooSkewed; the answer's Date tells how far off this clock is."""
    date = email.utils.formatdate(time.time() + offset, usegmt=True)
    err = error_for_status(403, "AccessDenied", None, server_date=date, bucket="b", key="k")
    assert isinstance(err, errors.AccessDenied)
    assert re.search(rf"this machine's clock is 1[12]\d\d s {words} the server's; .*fix the clock \(NTP\)", str(err))
    near = error_for_status(403, "AccessDenied", None, server_date=email.utils.formatdate(usegmt=True))
    assert "clock" not in str(near)
