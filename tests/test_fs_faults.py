"""s3io.fs.S3FileSystem behind the fault proxy: one retry loop (the policy's), typed errors, resumed reads."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fsspec.asyn import sync

from s3io import errors
from s3io.fs import S3FileSystem
from testbed.faultproxy import ErrorResponse, FaultRule, ResetBeforeHeaders, SlowBody, Stall, StallBeforeHeaders
from testbed.moto_server import boto3_client

pytestmark = pytest.mark.timeout(60)

PAYLOAD = bytes(range(256)) * 64  # 16 KiB
FAST = {"backoff_base": "1ms", "backoff_cap": "100ms"}


@pytest.fixture
def make_fs(fault_proxy: Any) -> Iterator[Callable[..., S3FileSystem]]:
    """Filesystems pointed at the fault proxy, closed after the test."""
    made: list[S3FileSystem] = []

    def make(**policy: Any) -> S3FileSystem:
        fs = S3FileSystem(endpoint_url=fault_proxy.url, policy={**FAST, **policy}, skip_instance_cache=True)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.close()


@pytest.fixture
def obj(bucket: str, s3_endpoint: Any) -> str:
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="data.bin", Body=PAYLOAD)
    return f"{bucket}/data.bin"


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_persistent_503_is_tried_exactly_max_attempts_times(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str, max_attempts: int
) -> None:
    fs = make_fs(max_attempts=str(max_attempts))
    fault_proxy.add_rule(FaultRule(ErrorResponse.slow_down(), method="HEAD"))
    with pytest.raises(OSError) as caught:
        fs.info(obj)
    assert fault_proxy.count(method="HEAD") == max_attempts  # neither botocore nor s3fs adds attempts
    assert caught.value.__cause__.attempts == max_attempts
    assert fs.stats().retries.get("throttled", 0) == max_attempts - 1


def test_one_503_on_a_botocore_call_is_retried_once(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str
) -> None:
    fs = make_fs(max_attempts="5")
    fault_proxy.add_rule(FaultRule(ErrorResponse.slow_down(), method="HEAD", times=1))
    assert fs.info(obj)["size"] == len(PAYLOAD)
    assert fault_proxy.count(method="HEAD") == 2


def test_missing_object_is_not_retried(make_fs: Callable[..., S3FileSystem], fault_proxy: Any, bucket: str) -> None:
    fs = make_fs(max_attempts="5")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{bucket}/missing")
    assert fault_proxy.count(method="GET") == 1
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/missing")
    assert fault_proxy.count(method="HEAD") == 1  # s3fs then lists the prefix once, as it always does


def test_503s_on_reads_are_retried_by_the_s3io_client(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str
) -> None:
    fs = make_fs(max_attempts="5")
    fault_proxy.add_rule(FaultRule(ErrorResponse.slow_down(), method="GET", times=2))
    assert fs.cat_file(obj, start=100, end=200) == PAYLOAD[100:200]
    assert fault_proxy.count(method="GET") == 3
    stats = fs.stats()
    assert stats.requests.get(("get", 503)) == 2
    assert stats.retries.get("throttled") == 2


def test_stalled_body_resumes_from_the_last_byte_pinned_to_the_etag(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str
) -> None:
    fs = make_fs(max_attempts="3", stall_timeout="300ms")
    fault_proxy.add_rule(FaultRule(Stall(after_bytes=5000), method="GET", times=1))
    assert fs.cat_file(obj, start=0, end=len(PAYLOAD)) == PAYLOAD
    first, second = fault_proxy.requests
    assert first.range == f"bytes=0-{len(PAYLOAD) - 1}"
    assert second.range == f"bytes=5000-{len(PAYLOAD) - 1}"
    assert second.if_match
    assert fs.stats().timeouts.get("stall") == 1


def test_stalled_botocore_call_is_cut_by_the_first_byte_deadline_and_retried(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str
) -> None:
    fs = make_fs(max_attempts="3", connect_timeout="500ms", first_byte_timeout="500ms")
    fault_proxy.add_rule(FaultRule(StallBeforeHeaders(), method="HEAD", times=1))
    started = time.monotonic()
    assert fs.info(obj)["size"] == len(PAYLOAD)
    assert time.monotonic() - started < 20  # generous: the deadline is ~1 s, botocore's default read timeout 60 s
    assert fault_proxy.count(method="HEAD") == 2
    assert fs.stats().timeouts.get("first_byte") == 1


def test_stalled_botocore_call_gives_up_after_max_attempts_with_a_deadline_error(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str
) -> None:
    fs = make_fs(max_attempts="2", connect_timeout="300ms", first_byte_timeout="300ms")
    fault_proxy.add_rule(FaultRule(StallBeforeHeaders(), method="HEAD"))
    with pytest.raises(TimeoutError) as caught:  # fsspec's sync() turns it into FSTimeoutError, a TimeoutError
        fs.info(obj)
    deadline = caught.value.__cause__
    assert isinstance(deadline, errors.DeadlineExceeded)
    assert deadline.phase == "first_byte"
    assert deadline.attempts == 2
    assert fault_proxy.count(method="HEAD") == 2


def test_connection_resets_are_retried_by_the_policy_and_bounded(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, obj: str, bucket: str
) -> None:
    fs = make_fs(max_attempts="2")
    fault_proxy.add_rule(FaultRule(ResetBeforeHeaders(), method="GET", path=r"list-type=2"))
    with pytest.raises(ConnectionError):
        fs.ls(bucket, detail=False)
    assert fs.stats().retries.get("connection") == 1
    # aiohttp itself re-sends an idempotent request once after a reset (RFC 9112 section 9.3.1.1), so each
    # policy attempt may reach the server twice; botocore and s3fs add nothing.
    assert 2 <= fault_proxy.count(method="GET", path=r"list-type=2") <= 4

    fault_proxy.clear_rules()
    assert fs.ls(bucket, detail=False) == [obj]


def test_non_retryable_error_on_a_write_is_raised_after_one_request(
    make_fs: Callable[..., S3FileSystem], fault_proxy: Any, bucket: str
) -> None:
    fs = make_fs(max_attempts="5")
    fault_proxy.add_rule(FaultRule(ErrorResponse(403, "AccessDenied", "Access Denied"), method="PUT"))
    with pytest.raises(PermissionError):
        fs.pipe(f"{bucket}/denied.bin", b"data")
    assert fault_proxy.count(method="PUT") == 1


@pytest.mark.parametrize(
    ("fault", "phase"),
    [(SlowBody(bytes_per_second=400, chunk_bytes=20), "operation"), (Stall(after_bytes=100), "stall")],
)
def test_a_body_botocore_reads_is_bounded_by_the_same_timers(
    fault_proxy: Any, obj: str, fault: Any, phase: str
) -> None:
    """An option only botocore can send (here IfUnmodifiedSince) makes reads go through botocore, and s3fs reads the
    GET's body after the call returned: a drip (16 KiB at 400 B/s: 40 s) or a stall there used to be bounded only by
    aiohttp's per-read timeout. The body is read under the stall timer and the operation's deadline."""
    fs = S3FileSystem(
        endpoint_url=fault_proxy.url,
        policy={**FAST, "max_attempts": "1", "stall_timeout": "1s", "operation_timeout": "3s"},
        s3_additional_kwargs={"IfUnmodifiedSince": datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)},
        skip_instance_cache=True,
    )
    try:
        assert not fs.reads_via_s3io
        fault_proxy.add_rule(FaultRule(fault, method="GET"))
        started = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            fs.cat_file(obj)
        assert time.monotonic() - started < 15  # the deadline is 3 s; the drip alone takes 40 s
        deadline = caught.value
        while deadline is not None and not isinstance(deadline, errors.DeadlineExceeded):
            deadline = deadline.__cause__ or deadline.__context__
        assert isinstance(deadline, errors.DeadlineExceeded) and deadline.phase == phase
    finally:
        fs.close()


def test_a_botocore_body_keeps_its_protocols_and_a_slow_consumer_is_not_timed_out(fault_proxy: Any, obj: str) -> None:
    """The timed body is still what s3fs and callers use (``async with``, ``async for``, ``iter_chunks``), and only
    time spent waiting for bytes counts: a consumer that takes 3.2 s over a healthy 16 KiB body read 1 KiB at a
    time is not cut by a 2 s operation deadline."""
    fs = S3FileSystem(
        endpoint_url=fault_proxy.url,
        policy={**FAST, "stall_timeout": "1s", "operation_timeout": "2s"},
        s3_additional_kwargs={"IfUnmodifiedSince": datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)},
        skip_instance_cache=True,
    )
    bucket, key = obj.split("/", 1)

    async def slowly(body: Any) -> bytes:
        got = []
        async with body as reading:
            while chunk := await reading.read(1024):
                got.append(chunk)
                await asyncio.sleep(0.2)
        return b"".join(got)

    async def iterated(body: Any) -> bytes:
        return b"".join([chunk async for chunk in body])

    async def chunked(body: Any) -> bytes:
        return b"".join([chunk async for chunk in body.iter_chunks(4096)])

    try:
        for consume in (slowly, iterated, chunked):
            body = fs.call_s3("get_object", Bucket=bucket, Key=key)["Body"]
            assert sync(fs.loop, consume, body) == PAYLOAD, consume.__name__
    finally:
        fs.close()
