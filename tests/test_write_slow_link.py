"""Uploads over a slow, shared uplink (FaultProxy's upload throttle): a part is cut for silence, never for slowness.

A 20 MiB write whose four 5 MiB parts share a 1.5 MB/s uplink (each part ~375 KB/s, ~14 s) commits, where the
1 MiB/s per-part floor cut each part at 2 + 1 + 5 s and the write never finished; a dead uplink (the proxy takes no
byte, the connection open) is still cut by the stall timer, and the failed write leaves no upload behind.
"""

from __future__ import annotations

import dataclasses
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


async def test_a_dead_uplink_is_still_cut_by_the_stall_timer_and_the_write_leaves_no_upload(
    s3_endpoint: Any, s3_client: Any, bucket: str
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
        with pytest.raises(DeadlineExceeded, match=r"phase=send"):
            await write_parquet_async(
                noise(8 * 1024), f"s3://{bucket}/dead/", endpoint_url=proxy.url, policy=dead, part_size=5 * MiB
            )
        proxy.set_upload_rate(LINK)  # the aborts carry no body: they pass either way
    assert uploads_left(s3_client, bucket) == []
