"""A kernel-level blackhole: moto in a network namespace of our own, silenced by an iptables DROP rule.

Dropped packets are what a dead peer or a partition looks like: no reset, no FIN, the kernel retransmits
for ~15 minutes. These tests need root and a namespace; elsewhere the fixture skips with the reason.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from s3io import DeadlineExceeded, Policy, S3Client, TransportError
from s3io.s3.range_read import RangeRead
from testbed.moto_server import boto3_client, unique_bucket_name
from testbed.netns import NetnsS3Server

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
POLICY = Policy(
    connect_timeout=1,
    first_byte_timeout=3,
    stall_timeout=1.5,
    operation_timeout=30,
    max_attempts=20,
    backoff_base=0.1,
    backoff_cap=0.5,
    tcp_user_timeout=2,
    keepalive_idle=1,
    keepalive_interval=1,
    keepalive_count=2,
)


@pytest.fixture
def ns_bucket(blackhole_server: NetnsS3Server) -> str:
    client = boto3_client(blackhole_server.url)
    name = unique_bucket_name()
    client.create_bucket(Bucket=name)
    return name


def _put(server: NetnsS3Server, bucket: str, key: str, size: int) -> bytes:
    data = random.Random(size).randbytes(size)
    boto3_client(server.url).put_object(Bucket=bucket, Key=key, Body=data)
    return data


def _restore_later(server: NetnsS3Server, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, server.restore)
    timer.start()
    return timer


async def test_blackhole_mid_body_recovers_on_a_fresh_connection(
    blackhole_server: NetnsS3Server, ns_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _put(blackhole_server, ns_bucket, "big.bin", 16 * MIB)
    original_add = RangeRead.add
    fired = threading.Event()

    def add_then_cut(self, chunk: bytes) -> bool:  # the fault trigger: cut the network after the first bytes
        wants_more = original_add(self, chunk)
        if not fired.is_set():
            fired.set()
            blackhole_server.blackhole()
        return wants_more

    monkeypatch.setattr(RangeRead, "add", add_then_cut)
    timer = _restore_later(blackhole_server, 3.0)
    try:
        async with S3Client(POLICY, endpoint_url=blackhole_server.url) as s3:
            started = time.monotonic()
            result = await s3.get_object(ns_bucket, "big.bin")
            elapsed = time.monotonic() - started
            stats = s3.stats()
    finally:
        timer.cancel()
    assert fired.is_set()
    assert result.data == data
    assert elapsed < POLICY.operation_timeout
    assert stats.timeouts.get("stall", 0) >= 1


async def test_request_into_a_blackholed_pooled_connection_is_failed_by_the_kernel_or_a_timer(
    blackhole_server: NetnsS3Server, ns_bucket: str
) -> None:
    data = _put(blackhole_server, ns_bucket, "small.bin", 1000)
    policy = POLICY.replace(first_byte_timeout=30)  # only TCP_USER_TIMEOUT (2 s) can end the first attempt early
    async with S3Client(policy, endpoint_url=blackhole_server.url) as s3:
        await s3.get_object(ns_bucket, "small.bin")  # leaves one pooled keep-alive connection
        blackhole_server.blackhole()
        timer = _restore_later(blackhole_server, 4.0)
        try:
            started = time.monotonic()
            result = await s3.get_object(ns_bucket, "small.bin")
            elapsed = time.monotonic() - started
        finally:
            timer.cancel()
        stats = s3.stats()
    assert result.data == data
    assert elapsed < 20  # far below the 30 s first-byte timer: the kernel gave up on unacknowledged data
    assert stats.retries.get("connection", 0) >= 1


async def test_network_cut_gives_a_typed_error_within_the_operation_deadline(
    blackhole_server: NetnsS3Server, ns_bucket: str
) -> None:
    _put(blackhole_server, ns_bucket, "cut.bin", 1000)
    policy = POLICY.replace(operation_timeout=6)
    async with S3Client(policy, endpoint_url=blackhole_server.url) as s3:
        await s3.get_object(ns_bucket, "cut.bin")
        blackhole_server.blackhole()
        started = time.monotonic()
        with pytest.raises((DeadlineExceeded, TransportError)) as info:
            await s3.get_object(ns_bucket, "cut.bin")
        elapsed = time.monotonic() - started
    assert elapsed < policy.operation_timeout + 1
    assert f"s3://{ns_bucket}/cut.bin" in str(info.value)


async def test_listing_and_put_are_bounded_too(blackhole_server: NetnsS3Server, ns_bucket: str) -> None:
    policy = POLICY.replace(operation_timeout=4)
    async with S3Client(policy, endpoint_url=blackhole_server.url) as s3:
        await s3.put_object(ns_bucket, "a", b"x")
        blackhole_server.blackhole()
        for operation in (
            s3.list_page(ns_bucket, ""),
            s3.put_object(ns_bucket, "b", b"y" * 100_000),
            s3.head_object(ns_bucket, "a"),
        ):
            started = time.monotonic()
            with pytest.raises((DeadlineExceeded, TransportError)):
                await asyncio.wait_for(operation, 60)  # wait_for only guards the test itself
            assert time.monotonic() - started < policy.operation_timeout + 1
