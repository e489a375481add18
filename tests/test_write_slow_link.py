"""Uploads over a slow, shared uplink (FaultProxy's upload throttle): parts in flight adapt to the link.

A 20 MiB write whose four 5 MiB parts share a 1.5 MB/s uplink (each part ~375 KB/s, ~14 s) commits, where the
1 MiB/s per-part floor cut each part at 2 + 1 + 5 s and the write never finished. Eight parts in flight on that link
each fall under the upload floor: they are cut for slowness and the writer halves its parts in flight (AIMD,
s3io.resilience.upload_pace), so the write commits within an operation deadline that eight at once would miss. A
dead uplink (the proxy takes no byte, the connection open) is still cut by the stall timer, never taken for a slow
one, and the failed write leaves no upload behind.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import pyarrow as pa
import pytest
from test_compact_support import make_client
from test_write_support import uploads_left, visible_ids

from s3io import Policy
from s3io.errors import DeadlineExceeded
from s3io.write import write_parquet_async
from testbed.faultproxy import FaultProxy

pytestmark = pytest.mark.timeout(180)
MiB = 1024 * 1024
LINK = 1_500_000  # bytes a second, shared
# short first-byte and stall timeouts: with the old floor a 5 MiB part was allowed 1 + 2 + 5 s
POLICY = Policy(backoff_base=0.01, backoff_cap=0.2, connect_timeout=1.0, first_byte_timeout=2.0, stall_timeout=3.0)


def noise(rows: int, width: int = 1024) -> pa.Table:
    """``rows`` rows of ``width`` random bytes (as hex: snappy cannot shrink them)."""
    return pa.table({"id": list(range(rows)), "blob": [os.urandom(width // 2).hex() for _ in range(rows)]})


async def test_the_throttle_caps_the_upload_rate_shared_by_every_connection(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=LINK) as proxy:
        began = time.monotonic()
        async with make_client(proxy.url, POLICY) as client:
            await client.put_object(bucket, "three-mb", os.urandom(3_000_000))
        took = time.monotonic() - began
    assert 1.5 <= took <= 15.0, took  # 2 s at the cap; generous both ways (a 64 KiB buffer may run ahead)
    assert s3_client.head_object(Bucket=bucket, Key="three-mb")["ContentLength"] == 3_000_000


async def test_a_20_mib_write_over_a_shared_1_5_mb_per_s_uplink_commits(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    table = noise(20 * 1024)  # 20 MiB of incompressible rows: four 5 MiB parts in flight at once
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=LINK) as proxy:
        began = time.monotonic()
        report = await write_parquet_async(
            table,
            f"s3://{bucket}/slow/",
            endpoint_url=proxy.url,
            policy=POLICY,
            part_size=5 * MiB,
            upload_concurrency=4,
            grace_period=0.0,
        )
        took = time.monotonic() - began
        retried = [r for r in proxy.requests if r.method == "PUT" and r.status is None]
    assert report.rows == 20 * 1024
    assert 8.0 <= took <= 90.0, took  # ~14 s at the cap
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/slow/") == list(range(20 * 1024))
    assert uploads_left(s3_client, bucket) == []
    assert not retried, retried


async def test_eight_parts_each_under_the_floor_go_down_to_fewer_and_the_write_commits(
    s3_endpoint: Any, s3_client: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    # eight 5 MiB parts at once on 1.5 MB/s: ~187 KB/s each, 28 s a part, past a 25 s operation deadline and under a
    # 256 KiB/s floor; four at once: ~375 KB/s, 14 s a part. The floor is measured over 2 stall timeouts (6 s).
    deadline = dataclasses.replace(POLICY, operation_timeout=25.0)
    rows = 40 * 1024
    caplog.set_level(logging.WARNING, logger="s3io")
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=LINK) as proxy:
        began = time.monotonic()
        report = await write_parquet_async(
            noise(rows),
            f"s3://{bucket}/eight/",
            endpoint_url=proxy.url,
            policy=deadline,
            part_size=5 * MiB,
            upload_concurrency=8,
            upload_floor="256KB/s",
            grace_period=0.0,
        )
        took = time.monotonic() - began
        puts = [r.query for r in proxy.requests if r.method == "PUT"]
    assert report.rows == rows
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/eight/") == list(range(rows))
    assert uploads_left(s3_client, bucket) == []
    assert report.slow_parts >= 1 and 1 <= report.parts_in_flight <= 4, report
    assert "too slow for the upload floor" in report.summary()
    assert len(puts) > len(set(puts)), "no part was sent twice"  # the parts cut for slowness went again
    lowered = [r.getMessage() for r in caplog.records if "slower than the upload floor" in r.getMessage()]
    assert lowered and "with 8 parts in flight; 4 in flight from now on" in lowered[0], lowered
    assert 20.0 <= took <= 150.0, took  # ~28 s at the cap plus one round of cuts; generous both ways


async def test_a_dead_uplink_is_still_cut_by_the_stall_timer_and_the_write_leaves_no_upload(
    s3_endpoint: Any, s3_client: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = dataclasses.replace(POLICY, max_attempts=2)
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=LINK) as proxy:
        proxy.set_upload_rate(0)
        began = time.monotonic()
        async with make_client(proxy.url, dead) as client:
            assert [o async for o in client.list_objects(bucket, "dead/")] == []  # the endpoint has answered
            with pytest.raises(DeadlineExceeded, match=r"\[phase=send\].*progress sending the request body"):
                await client.put_object(bucket, "dead", os.urandom(2 * MiB))
        took = time.monotonic() - began
        assert took <= 30.0, took  # two attempts of a 3 s stall timer, not 2 MiB at a floor rate
        caplog.set_level(logging.WARNING, logger="s3io")
        began = time.monotonic()
        with pytest.raises(DeadlineExceeded, match=r"phase=send\]"):  # silence: not slow_send
            await write_parquet_async(
                noise(12 * 1024),
                f"s3://{bucket}/dead/",
                endpoint_url=proxy.url,
                policy=dead,
                part_size=5 * MiB,
                upload_concurrency=2,
                upload_floor="256KB/s",
            )
        took = time.monotonic() - began
        proxy.set_upload_rate(LINK)  # the aborts carry no body: they pass either way
    assert took <= 60.0, took  # two attempts of a 3 s stall timer for each part
    assert not [r for r in caplog.records if "upload floor" in r.getMessage()]  # the parts in flight stayed
    assert uploads_left(s3_client, bucket) == []
