"""SigV4 signing: byte-for-byte what botocore signs, and no secret in any repr or error."""

from __future__ import annotations

import datetime
import email.utils
import logging
import re
import time

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from s3io import Policy, S3Client, errors
from s3io.resilience.retryable import clock_correction, error_for_status
from s3io.transport.credentials import Credentials
from s3io.transport.endpoint import resolve_endpoint
from s3io.transport.sigv4 import EMPTY_SHA256, Signer, canonical_query
from testbed.moto_server import FAKE_ACCESS_KEY, MotoServer, S3Endpoint, boto3_client

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
    body to say so): without the correction, the error names the clock and NTP, not only 'access denied'."""
    assert moto_server.front is not None
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="k", Body=b"data")
    moto_server.front.clock = lambda: time.time() + 20 * 60
    try:
        async with S3Client(Policy(max_attempts=1, correct_clock_skew=False), endpoint_url=s3_endpoint.url) as s3:
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


@pytest.mark.signature_errors_expected
@pytest.mark.parametrize("minutes", [20, -20, 600])
async def test_a_clock_off_the_servers_is_corrected_after_one_refusal_and_stays_corrected(
    s3_endpoint: S3Endpoint,
    moto_server: MotoServer,
    bucket: str,
    minutes: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the AWS SDKs for Java, JavaScript, Go and Rust do: the refusal's Date gives the server's clock, the request
    is signed again with it (within the same attempt: no retry, no backoff), and every later request of the client
    is signed with it from the start: one refusal in all, whatever the operation."""
    assert moto_server.front is not None
    monkeypatch.setattr(logging.getLogger("s3io"), "propagate", True)  # as a library's logger is (a CLI stops it)
    caplog.set_level(logging.WARNING, logger="s3io")
    moto_server.front.clock = lambda: time.time() + minutes * 60
    try:
        async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
            await s3.put_object(bucket, "k", b"data")
            assert (await s3.get_object(bucket, "k")).data == b"data"
            assert (await s3.head_object(bucket, "k")).size == 4
            assert [o.key async for o in s3.list_objects(bucket)] == ["k"]
            async with s3.multipart_writer(bucket, "big", part_size=5 << 20) as writer:
                await writer.write(b"x" * (6 << 20))
            stats = s3.stats()
        rejected = moto_server.front.take_rejections()
        assert [r.code for r in rejected] == ["RequestTimeTooSkewed"]
        assert stats.retry_count == 0
        learnt = [re.search(r"clock is (\d+) s (behind|ahead of) the clock of", r.getMessage()) for r in caplog.records]
        found = sorted({(int(m.group(1)), m.group(2)) for m in learnt if m})  # one warning (a handler may echo it)
        assert len(found) == 1 and abs(found[0][0] - abs(minutes) * 60) <= 5
        assert found[0][1] == ("behind" if minutes > 0 else "ahead of")
    finally:
        moto_server.front.clock = time.time
        moto_server.front.take_rejections()


@pytest.mark.signature_errors_expected
async def test_a_head_refused_for_skew_is_corrected_by_its_date_alone(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str
) -> None:
    """A HEAD's 403 has no body to name RequestTimeTooSkewed: its Date is enough to correct the clock."""
    assert moto_server.front is not None
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="k", Body=b"data")
    moto_server.front.clock = lambda: time.time() - 30 * 60
    try:
        async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
            assert (await s3.head_object(bucket, "k")).size == 4
        assert len(moto_server.front.take_rejections()) == 1
    finally:
        moto_server.front.clock = time.time
        moto_server.front.take_rejections()


@pytest.mark.signature_errors_expected
async def test_a_refusal_the_clock_does_not_explain_is_not_blamed_on_it_once_corrected(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong key on a skewed clock (the refusal's Date is off, so the clock is corrected once): the error names the
    key, not the clock."""
    assert moto_server.front is not None
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "typo-key")
    moto_server.front.clock = lambda: time.time() + 20 * 60
    try:
        async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
            with pytest.raises(errors.AccessDenied) as info:
                await s3.get_object(bucket, "k")
        assert "unknown access key" in str(info.value) and "clock" not in str(info.value)
        assert [r.code for r in moto_server.front.take_rejections()] == ["InvalidAccessKeyId"] * 2  # one correction
    finally:
        moto_server.front.clock = time.time
        moto_server.front.take_rejections()


@pytest.mark.parametrize(
    ("status", "code", "age", "round_trip", "offset", "expected"),
    [
        (403, "RequestTimeTooSkewed", None, 0.2, 0.0, 1200.0),
        (403, "AccessDenied", None, 0.2, 0.0, 1200.0),  # a HEAD: no code, the Date tells
        (400, "RequestTimeTooSkewed", None, 0.2, 0.0, 1200.0),  # stores that answer 400
        (404, "NoSuchKey", None, 0.2, 0.0, None),  # not a refusal the clock explains
        (403, "AccessDenied", "30", 0.2, 0.0, None),  # a cached answer: its Date is old
        (403, "AccessDenied", None, 1000.0, 0.0, None),  # too slow to measure the server's clock by
        (403, "AccessDenied", None, 0.2, 1190.0, None),  # already corrected (within 4 minutes)
    ],
)
def test_the_clock_correction_is_measured_only_from_refusals_it_explains(
    status: int, code: str, age: str | None, round_trip: float, offset: float, expected: float | None
) -> None:
    sent = 1_800_000_000.0
    received = sent + round_trip
    date = email.utils.formatdate((sent + received) / 2 + 1200, usegmt=True)  # the server: 20 minutes ahead
    got = clock_correction(status, code, date, age, sent, received, offset)
    assert got == (None if expected is None else pytest.approx(expected, abs=1.0))
    assert clock_correction(403, "AccessDenied", None, None, sent, received, 0.0) is None  # no Date
    assert clock_correction(403, "AccessDenied", "not a date", None, sent, received, 0.0) is None
