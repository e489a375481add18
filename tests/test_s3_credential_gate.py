"""Credentials not yet accepted go one request at a time (s3io.s3.credential_gate), against the strict moto front."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from support.moto_server import MotoServer, S3Endpoint, boto3_client

from s3io import Policy, S3Client, errors
from s3io.s3 import credential_gate
from s3io.transport.credentials import Credentials

pytestmark = pytest.mark.timeout(30)

WRONG = Credentials("AKIDWRONGWRONGWRONG0", "not-the-secret")


@pytest.fixture
def unproven() -> Iterator[None]:
    """The process has seen no endpoint accept any credentials (the session's were, by earlier tests)."""
    credential_gate.forget_all()
    yield
    credential_gate.forget_all()


@pytest.mark.signature_errors_expected
async def test_requests_started_together_with_wrong_credentials_send_one_and_all_get_its_refusal(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str
) -> None:
    """The first refusal is the only request the store sees: the others are refused without being sent, each naming
    its own object, so none of them reaches the store after the caller has its error."""
    assert moto_server.front is not None
    moto_server.front.take_rejections()
    async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url, credentials=WRONG) as s3:
        keys = [f"t/day={day}/a.parquet" for day in range(4)]
        outcomes = await asyncio.gather(
            s3.list_page(bucket, "t/"), *(s3.head_object(bucket, key) for key in keys), return_exceptions=True
        )
        sent = s3.stats().request_count
    assert sent == 1, sent
    assert all(isinstance(o, errors.AccessDenied) and "unknown access key" in str(o) for o in outcomes), outcomes
    assert [o.key for o in outcomes[1:] if isinstance(o, errors.S3IOError)] == keys
    assert [r.code for r in moto_server.front.take_rejections()] == ["InvalidAccessKeyId"]


@pytest.mark.signature_errors_expected
async def test_a_skewed_clock_costs_one_refusal_however_many_requests_start_together(
    s3_endpoint: S3Endpoint, moto_server: MotoServer, bucket: str, unproven: None
) -> None:
    """The first request is refused for the clock and sent again with the server's time before the others go: they
    are signed right from the start (without the gate, each of them was refused once)."""
    assert moto_server.front is not None
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="k", Body=b"data")
    moto_server.front.take_rejections()
    moto_server.front.clock = lambda: time.time() + 20 * 60
    try:
        async with S3Client(Policy(max_attempts=1), endpoint_url=s3_endpoint.url) as s3:
            heads = await asyncio.gather(*(s3.head_object(bucket, "k") for _ in range(6)))
        assert [h.size for h in heads] == [4] * 6
        assert [r.code for r in moto_server.front.take_rejections()] == ["RequestTimeTooSkewed"]
    finally:
        moto_server.front.clock = time.time
        moto_server.front.take_rejections()


async def test_requests_to_an_endpoint_that_never_answers_are_not_queued_behind_each_others_timeouts(
    silent_port: str, unproven: None
) -> None:
    """No answer says nothing of the credentials: the waiting requests go at once, as they would without the gate,
    instead of each waiting out the one before it (six one-at-a-time attempts of 0.6 s each would take 7 s)."""
    policy = Policy(connect_timeout=0.3, first_byte_timeout=0.3, max_attempts=2, backoff_base=0.01, backoff_cap=0.02)
    started = time.monotonic()
    async with S3Client(policy, endpoint_url=silent_port, credentials=Credentials("a", "b")) as s3:
        outcomes = await asyncio.gather(*(s3.head_object("b", f"k{i}") for i in range(6)), return_exceptions=True)
    elapsed = time.monotonic() - started
    assert all(isinstance(o, errors.EndpointUnreachable) for o in outcomes), outcomes
    assert elapsed < 4.5, elapsed  # the first request's attempt, then all the others' at once: about 1.8 s
