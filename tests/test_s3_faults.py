"""The S3 client against a misbehaving S3: a fault proxy between s3io and a real moto server.

Bounds on time are generous (2 noisy cores); exact figures live in benchmarks/.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import time
from collections.abc import Callable

import pytest
from support.policies import MID_BODY_FAULTS

from s3io import (
    Credentials,
    DeadlineExceeded,
    NotFound,
    ObjectChanged,
    RetryBudgetExhausted,
    S3Client,
    errors,
)
from testbed.faultproxy import (
    ErrorResponse,
    FaultProxy,
    FaultRule,
    Latency,
    ProxyRequest,
    Reset,
    SlowBody,
    Stall,
    StallBeforeHeaders,
    Truncate,
)
from testbed.moto_server import boto3_client

pytestmark = pytest.mark.timeout(90)

MIB = 1024 * 1024
FAST = MID_BODY_FAULTS


def _put(s3_client, bucket: str, key: str, size: int, seed: int = 1) -> bytes:
    data = random.Random(seed).randbytes(size)
    s3_client.put_object(Bucket=bucket, Key=key, Body=data)
    return data


def _gets(proxy: FaultProxy, key: str) -> list:
    return [r for r in proxy.requests if r.method == "GET" and r.path.endswith("/" + key)]


async def test_stall_mid_body_recovers_within_stall_timeout_and_fetches_only_the_rest(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    data = _put(s3_client, bucket, "stall.bin", 4 * MIB)
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=MIB), method="GET", times=1))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        started = time.monotonic()
        result = await s3.get_object(bucket, "stall.bin")
        elapsed = time.monotonic() - started
        stats = s3.stats()
    assert result.data == data
    assert elapsed < FAST.stall_timeout + 15  # bounded by the stall timer, not the kernel; generous for 2 busy cores
    first, retry = _gets(fault_proxy, "stall.bin")
    assert first.range is None
    assert retry.range is not None and retry.range.startswith("bytes=")
    resumed_at = int(retry.range.split("=")[1].split("-")[0])
    assert MIB <= resumed_at < 4 * MIB  # only the missing bytes were asked for again
    assert retry.header("If-Match") == result.etag  # pinned to the version the first bytes came from
    assert retry.connection_id != first.connection_id  # the silent connection was discarded, not pooled
    assert stats.timeouts == {"stall": 1} and stats.retries == {"timeout:stall": 1}


async def test_every_attempt_stalls_gives_deadline_exceeded_within_the_operation_deadline(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    _put(s3_client, bucket, "dead.bin", 2 * MIB)
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=64 * 1024), method="GET"))
    policy = FAST.replace(operation_timeout=4, max_attempts=100)
    async with S3Client(policy, endpoint_url=fault_proxy.url) as s3:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded) as info:
            await s3.get_object(bucket, "dead.bin")
        elapsed = time.monotonic() - started
    assert elapsed < policy.operation_timeout + 1
    assert info.value.phase == "operation"
    message = str(info.value)
    assert f"s3://{bucket}/dead.bin" in message and "attempts=" in message and "elapsed=" in message


@pytest.mark.parametrize(
    "fault", [Reset(after_bytes=300_000), Truncate(after_bytes=300_000)], ids=["reset", "truncate"]
)
async def test_reset_or_truncate_once_resumes_from_the_last_byte(
    fault_proxy: FaultProxy, s3_client, bucket: str, fault: object
) -> None:
    data = _put(s3_client, bucket, "broken.bin", 3 * MIB)
    fault_proxy.add_rule(FaultRule(fault=fault, method="GET", times=1))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        result = await s3.get_object(bucket, "broken.bin", 100, 3 * MIB - 100)
        stats = s3.stats()
    assert result.data == data[100 : 3 * MIB - 100]
    first, retry = _gets(fault_proxy, "broken.bin")
    assert first.range == f"bytes=100-{3 * MIB - 101}"
    resumed_at = int(retry.range.split("=")[1].split("-")[0])
    assert 100 < resumed_at <= 100 + 300_000
    assert retry.range.endswith(f"-{3 * MIB - 101}")
    assert stats.retry_count == 1


async def test_slow_drip_is_not_killed_by_the_stall_timer(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    data = _put(s3_client, bucket, "drip.bin", 200_000)
    fault_proxy.add_rule(FaultRule(fault=SlowBody(bytes_per_second=80_000, chunk_bytes=4096), method="GET"))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        result = await s3.get_object(bucket, "drip.bin")  # ~2.5 s of transfer, stall timeout 1 s
        stats = s3.stats()
    assert result.data == data
    assert stats.retry_count == 0 and stats.timeout_count == 0


async def test_no_headers_fails_the_attempt_on_the_first_byte_timer(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    data = _put(s3_client, bucket, "silent.bin", 1000)
    fault_proxy.add_rule(FaultRule(fault=StallBeforeHeaders(), method="GET", times=1))
    policy = FAST.replace(first_byte_timeout=0.5)
    async with S3Client(policy, endpoint_url=fault_proxy.url) as s3:
        started = time.monotonic()
        result = await s3.get_object(bucket, "silent.bin")
        elapsed = time.monotonic() - started
        stats = s3.stats()
    assert result.data == data
    assert elapsed < policy.connect_timeout + policy.first_byte_timeout + 3
    assert stats.timeouts == {"first_byte": 1}


async def test_slowdown_on_a_fifth_of_requests_still_reads_every_object_with_bounded_requests(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    objects = {f"obj-{i:02d}": _put(s3_client, bucket, f"obj-{i:02d}", 10_000 + i, seed=i) for i in range(50)}
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", probability=0.2))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        results = await asyncio.gather(*(s3.get_object(bucket, key) for key in objects))
        stats = s3.stats()
    assert [r.data for r in results] == list(objects.values())
    gets = fault_proxy.count(method="GET")
    assert gets <= 1.5 * len(objects)
    assert stats.retries.get("throttled", 0) == gets - len(objects)


@pytest.mark.parametrize(
    ("status", "code", "error"), [(403, "AccessDenied", errors.AccessDenied), (404, "NoSuchKey", NotFound)]
)
async def test_access_denied_and_not_found_are_never_retried(
    fault_proxy: FaultProxy, bucket: str, status: int, code: str, error: type
) -> None:
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(status, code, "nope"), method="GET"))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(error) as info:
            await s3.get_object(bucket, "any-key")
    assert fault_proxy.count(method="GET") == 1
    assert f"s3://{bucket}/any-key" in str(info.value) and code in str(info.value)
    assert "testing" not in str(info.value)  # the (fake) secret never appears


async def test_object_overwritten_between_two_ranges_raises_object_changed(s3_endpoint, s3_client, bucket: str) -> None:
    _put(s3_client, bucket, "moving.bin", 100_000, seed=1)
    async with S3Client(FAST, endpoint_url=s3_endpoint.url) as s3:
        first = await s3.get_object(bucket, "moving.bin", 0, 50_000)
        _put(s3_client, bucket, "moving.bin", 100_000, seed=2)
        with pytest.raises(ObjectChanged) as info:
            await s3.get_object(bucket, "moving.bin", 50_000, 100_000, if_match=first.etag)
    assert f"s3://{bucket}/moving.bin" in str(info.value)


async def test_object_overwritten_during_a_resume_never_mixes_bytes(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    _put(s3_client, bucket, "swap.bin", 2 * MIB, seed=1)
    fault_proxy.add_rule(FaultRule(fault=Reset(after_bytes=MIB), method="GET", times=1))
    fault_proxy.add_rule(
        FaultRule(fault=ErrorResponse(412, "PreconditionFailed", "changed"), method="GET", predicate=_has_if_match)
    )
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(ObjectChanged):
            await s3.get_object(bucket, "swap.bin")


def _has_if_match(request) -> bool:
    return request.header("If-Match") is not None


async def test_retry_budget_stops_a_retry_storm(fault_proxy: FaultProxy, bucket: str) -> None:
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET"))
    policy = FAST.replace(retry_budget=10, retry_cost=5, max_attempts=10)
    async with S3Client(policy, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(RetryBudgetExhausted):
            await asyncio.gather(*(s3.get_object(bucket, f"k{i}") for i in range(5)))
    assert fault_proxy.count(method="GET") <= 5 + 2  # 5 first attempts + the 2 retries the budget allows


async def test_expired_token_refreshes_credentials_once_then_succeeds(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    data = _put(s3_client, bucket, "token.bin", 1000)
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "ExpiredToken", "expired"), method="GET", times=1))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        result = await s3.get_object(bucket, "token.bin")
        assert s3.stats().retries == {"expired_credentials": 1}
    assert result.data == data


async def test_a_head_answered_400_without_a_code_refreshes_credentials_once(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    """S3 cannot name ExpiredToken in a HEAD's answer (no body): a bare 400 gets one refresh and one retry."""
    _put(s3_client, bucket, "head.bin", 1000)
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "ExpiredToken", "expired"), method="HEAD", times=1))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:  # credentials from the provider chain
        assert (await s3.head_object(bucket, "head.bin")).size == 1000
        assert s3.stats().retries == {"unexplained_400": 1}
    assert fault_proxy.count(method="HEAD") == 2

    fault_proxy.reset_log()
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "ExpiredToken", "expired"), method="HEAD"))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(errors.RequestError, match="ExpiredToken") as info:
            await s3.head_object(bucket, "head.bin")
    assert info.value.status == 400 and info.value.attempts == 2
    assert fault_proxy.count(method="HEAD") == 2  # one refresh, then the error: never a retry loop


async def test_explicit_credentials_are_not_retried_on_expired_token(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    """Refreshing explicit keys cannot change them, so ExpiredToken is final at once."""
    _put(s3_client, bucket, "explicit.bin", 10)
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "ExpiredToken", "expired"), method="GET", times=1))
    credentials = Credentials("AKIDEXAMPLE", "secret", "expired-session-token")
    async with S3Client(FAST, endpoint_url=fault_proxy.url, credentials=credentials) as s3:
        with pytest.raises(errors.RequestError, match="ExpiredToken"):
            await s3.get_object(bucket, "explicit.bin")
        assert s3.stats().retries == {}
    assert fault_proxy.count(method="GET") == 1


async def test_error_inside_a_200_is_retried_for_copy(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    data = _put(s3_client, bucket, "src.bin", 1000)
    fault_proxy.add_rule(
        FaultRule(fault=ErrorResponse(200, "InternalError", "copy failed"), method="PUT", path="dst.bin", times=1)
    )
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        await s3.copy_object(bucket, "src.bin", bucket, "dst.bin")
        assert s3.stats().retries == {"server_error": 1}
    assert s3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == data


async def test_multipart_upload_aborts_on_a_failed_part(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    fault_proxy.add_rule(
        FaultRule(fault=ErrorResponse(400, "InvalidPart", "bad part"), method="PUT", path="partNumber=2")
    )
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        upload_id = await s3.create_multipart_upload(bucket, "mp.bin")
        await s3.upload_part(bucket, "mp.bin", upload_id, 1, os.urandom(5 * MIB))
        with pytest.raises(errors.RequestError):
            await s3.upload_part(bucket, "mp.bin", upload_id, 2, b"tail")
        await s3.abort_multipart_upload(bucket, "mp.bin", upload_id)
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


async def test_pooled_connections_are_reused_when_healthy(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    _put(s3_client, bucket, "pool.bin", 1000)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        for _ in range(5):
            await s3.get_object(bucket, "pool.bin")
    assert len({r.connection_id for r in fault_proxy.requests}) == 1


async def test_multipart_writer_uploads_parts_in_parallel_and_survives_a_503(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    data = random.Random(3).randbytes(23 * MIB)
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="PUT", path="partNumber=2", times=1))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        async with s3.multipart_writer(bucket, "big.bin", part_size=5 * MIB, concurrency=3) as writer:
            for i in range(0, len(data), 1_000_000):
                await writer.write(data[i : i + 1_000_000])
        assert s3.stats().requests_for("upload_part") == 5 + 1  # 5 parts, one retried
    assert s3_client.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == data


async def test_multipart_writer_aborts_when_the_caller_fails(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(ZeroDivisionError):
            async with s3.multipart_writer(bucket, "never.bin", part_size=5 * MIB) as writer:
                await writer.write(os.urandom(6 * MIB))
                raise ZeroDivisionError  # the caller's own failure, mid-upload
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert "Contents" not in s3_client.list_objects_v2(Bucket=bucket)


async def test_multipart_writer_aborts_on_a_part_that_cannot_be_uploaded(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "InvalidPart", "bad"), method="PUT", path="partNumber=2"))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(errors.RequestError):
            async with s3.multipart_writer(bucket, "bad.bin", part_size=5 * MIB) as writer:
                await writer.write(os.urandom(16 * MIB))
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


async def test_a_failed_abort_never_replaces_the_error_that_caused_it(
    fault_proxy: FaultProxy, s3_client, bucket: str, caplog, monkeypatch
) -> None:
    """A part refused (400) and the abort refused too (500 past the retries): the caller gets the part's error, not
    the abort's, and the abort's failure is logged with what to do about the parts left behind."""
    monkeypatch.setattr(logging.getLogger("s3io"), "propagate", True)  # as a library's logger is (a CLI stops it)
    caplog.set_level(logging.WARNING, logger="s3io")
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse(400, "InvalidPart", "bad"), method="PUT", path="partNumber=1"))
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.internal_error(), method="DELETE", path="uploadId="))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(errors.RequestError, match="bad"):
            async with s3.multipart_writer(bucket, "refused.bin", part_size=5 * MIB) as writer:
                await writer.write(os.urandom(6 * MIB))
    assert "aborting the failed multipart upload failed too" in caplog.text
    assert "lifecycle rule" in caplog.text
    for upload in s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        s3_client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])


async def test_a_cancelled_close_returns_at_once_and_the_abort_finishes_on_its_own(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    """``asyncio.wait_for(writer.close(), 0.5)`` while parts are slow: the caller gets its TimeoutError when it asked
    for it, not after an abort that takes seconds (it used to wait for the abort, and an abort that failed replaced
    the cancellation); the abort still runs, and the client's close waits for it, so closing the client right
    after the cancel leaves no upload behind."""
    fault_proxy.add_rule(FaultRule(fault=Latency(5.0), method="PUT", path="partNumber="))
    fault_proxy.add_rule(FaultRule(fault=Latency(4.0), method="DELETE", path="uploadId="))
    patient = dataclasses.replace(FAST, first_byte_timeout=10)  # the slow answers are slow, not dead
    async with S3Client(patient, endpoint_url=fault_proxy.url) as s3:
        writer = s3.multipart_writer(bucket, "slow.bin", part_size=5 * MIB)
        await writer.write(os.urandom(6 * MIB))
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(writer.close(), 0.5)
        assert time.monotonic() - started < 2.5  # the abort alone waits 4 s at the proxy
        writer = s3.multipart_writer(bucket, "slower.bin", part_size=5 * MIB)
        await writer.write(os.urandom(6 * MIB))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(writer.close(), 0.5)
    # the client was closed right after the cancel: close() waited for the aborts, so none of the uploads is left
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


async def test_small_writer_output_is_a_single_put(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        async with s3.multipart_writer(bucket, "small.bin") as writer:
            await writer.write(b"hello")
        assert s3.stats().requests_for("put") == 1 and s3.stats().requests_for("create_multipart") == 0
    assert s3_client.get_object(Bucket=bucket, Key="small.bin")["Body"].read() == b"hello"


async def test_head_get_put_and_errors_share_one_kept_alive_connection(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    """Answers without a body (HEAD), with an error body (404) and to a request with a body (PUT) all leave
    the connection clean, so every request after the first reuses it."""
    _put(s3_client, bucket, "mixed.bin", 3000)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        info = await s3.head_object(bucket, "mixed.bin")
        with pytest.raises(NotFound):
            await s3.get_object(bucket, "absent.bin")
        await s3.put_object(bucket, "written.bin", b"x" * 777)
        assert (await s3.get_object(bucket, "written.bin")).data == b"x" * 777
        assert (await s3.get_object(bucket, "mixed.bin", 10, 20)).data == s3_client.get_object(
            Bucket=bucket, Key="mixed.bin"
        )["Body"].read()[10:20]
        await s3.put_object(bucket, "empty.bin", b"")
        assert (await s3.get_object(bucket, "empty.bin")).data == b""
    assert info.size == 3000
    assert [r.method for r in fault_proxy.requests] == ["HEAD", "GET", "PUT", "GET", "GET", "PUT", "GET"]
    assert len({r.connection_id for r in fault_proxy.requests}) == 1


async def test_a_line_break_in_a_header_is_refused_before_anything_is_sent(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        with pytest.raises(errors.InvalidConfig, match="line break"):
            await s3.put_object(bucket, "k.bin", b"data", content_type="text/plain\r\nx-amz-acl: public-read")
        with pytest.raises(errors.InvalidConfig, match="line break"):
            await s3.get_object(bucket, "k.bin", if_match='"etag"\n')
        with pytest.raises(errors.InvalidConfig, match="space"):
            await s3.head_object("bad bucket", "k.bin")
    assert fault_proxy.requests == []


def _signed_for(region: str) -> Callable[[ProxyRequest], bool]:
    return lambda request: f"/{region}/s3/aws4_request" in (request.header("authorization") or "")


@pytest.mark.parametrize(
    "answer",
    [
        ErrorResponse(
            301,
            "PermanentRedirect",
            "The bucket you are attempting to access must be addressed using the specified endpoint.",
            headers=(("x-amz-bucket-region", "eu-west-1"),),
        ),
        None,  # the strict front's own answer: 400 AuthorizationHeaderMalformed, as S3 gives it
    ],
    ids=["301", "400"],
)
async def test_a_bucket_in_another_region_is_followed_once_and_remembered(
    answer: ErrorResponse | None, fault_proxy: FaultProxy, s3_endpoint, far_bucket: str
) -> None:
    """S3 names the bucket's region in a wrong-region answer: s3io re-signs a fresh copy of the request for it (one
    extra request, accepted by the signature-checking front) and signs every later request of that bucket for
    it straight away. Re-sending the already-signed headers would sign ``authorization`` itself: S3 refuses that."""
    setup = boto3_client(s3_endpoint.url, region="eu-west-1")
    data = bytes(range(256)) * 8
    setup.put_object(Bucket=far_bucket, Key="far.bin", Body=data)
    if answer is not None:
        fault_proxy.add_rule(FaultRule(fault=answer, predicate=_signed_for("us-east-1")))
    async with S3Client(FAST, endpoint_url=fault_proxy.url, region="us-east-1") as s3:
        assert (await s3.get_object(far_bucket, "far.bin")).data == data
        assert (await s3.head_object(far_bucket, "far.bin")).size == len(data)
        await s3.put_object(far_bucket, "near.bin", b"written after the redirect")
        assert s3.stats().retry_count == 0
    answered = fault_proxy.wait_for_requests(4, completed=True)
    regions = ["us-east-1" if _signed_for("us-east-1")(r) else "eu-west-1" for r in answered]
    assert regions == ["us-east-1", "eu-west-1", "eu-west-1", "eu-west-1"]
    assert [r.status for r in answered][1:] == [200, 200, 200]
    assert setup.get_object(Bucket=far_bucket, Key="near.bin")["Body"].read() == b"written after the redirect"


async def test_a_wrong_region_answer_that_persists_is_an_error_naming_the_region(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    fault_proxy.add_rule(
        FaultRule(
            fault=ErrorResponse(
                301, "PermanentRedirect", "wrong endpoint", headers=(("x-amz-bucket-region", "eu-west-1"),)
            )
        )
    )
    async with S3Client(FAST, endpoint_url=fault_proxy.url, region="us-east-1") as s3:
        with pytest.raises(errors.RequestError, match="the bucket is in eu-west-1; pass region='eu-west-1'"):
            await s3.get_object(bucket, "any.bin")
    assert len(fault_proxy.requests) == 2  # the first answer, then one re-signed try: no loop, no retries


async def test_unfinished_multipart_uploads_are_listed_page_by_page_and_can_be_aborted(
    fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    keys = [f"up/{i}.bin" for i in range(5)] + ["elsewhere/x.bin"]
    for key in keys:
        s3_client.create_multipart_upload(Bucket=bucket, Key=key)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        listed = [u async for u in s3.list_multipart_uploads(bucket, "up/", page_size=2)]
        assert sorted(u.key for u in listed) == keys[:5]
        assert all(u.upload_id and u.initiated for u in listed)
        for upload in listed:
            await s3.abort_multipart_upload(bucket, upload.key, upload.upload_id)
        assert [u.key async for u in s3.list_multipart_uploads(bucket)] == ["elsewhere/x.bin"]
        with pytest.raises(errors.InvalidConfig, match="page_size"):
            [u async for u in s3.list_multipart_uploads(bucket, page_size=0)]
    pages = [r for r in fault_proxy.requests if "uploads" in r.query and r.method == "GET"]
    assert "max-uploads=2" in pages[0].query and "prefix=up%2F" in pages[0].query
