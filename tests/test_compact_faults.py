"""Compaction through the fault proxy: throttling, resets, stalls and lost responses still give exactly the rows.

The lost responses matter most: a conditional PUT (lock, journal) or DELETE that the server applied but whose
answer never arrived is retried by the client and then fails its own condition (412 / 404); the protocol must
recognise its own write and carry on, neither failing nor committing twice.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_compact_support import (
    FAST_POLICY,
    TEST_OPTIONS,
    all_keys,
    control_keys,
    make_client,
    plain_table,
    same_rows,
    visible_table,
    write_landing_zone,
)

from s3io import AccessDenied
from s3io.compaction import compact_prefix
from s3io.s3.capabilities import Capability
from s3io.table.store_check import probe_store
from testbed.faultproxy import ErrorResponse, FaultRule, Reset, ResetBeforeHeaders, Stall

pytestmark = pytest.mark.timeout(120)

PREFIX = "faulty/"


async def test_compaction_through_503s_resets_stalls_and_lost_responses_is_exact(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    rules = [
        # lost responses of conditional writes: applied upstream, then the connection is reset
        FaultRule(ResetBeforeHeaders(forward_first=True), method="PUT", path=r"_s3io_table/LOCK$", times=1),
        FaultRule(ResetBeforeHeaders(forward_first=True), method="PUT", path=r"/journal/", nth=1),
        FaultRule(ResetBeforeHeaders(forward_first=True), method="PUT", path=r"/journal/", nth=3),
        FaultRule(ResetBeforeHeaders(forward_first=True), method="DELETE", path=r"part-000\d\d\.parquet", times=2),
        # the same for DeleteObjects where the store honours per-object ETags (moto >= 5.2.6)
        FaultRule(
            ResetBeforeHeaders(forward_first=True), method="POST", predicate=lambda r: r.query == "delete=", times=1
        ),
        # throttling, resets mid-body, a stalled body
        FaultRule(ErrorResponse.slow_down(), method="PUT", times=3),
        FaultRule(ErrorResponse.slow_down(), method="PUT", path=r"part-c-", times=1),  # the copy
        FaultRule(Reset(after_bytes=200), method="GET", path=r"part-000\d\d\.parquet", times=3),
        FaultRule(Stall(after_bytes=100), method="GET", path=r"date(=|%3D)2/part-00004\.parquet", nth=1),  # its one GET
        FaultRule(ErrorResponse.internal_error(), method="HEAD", times=2),
    ]
    policy = FAST_POLICY.replace(stall_timeout=0.5)
    async with make_client(fault_proxy.url, policy) as client:
        verdict = await probe_store(client, bucket, PREFIX)  # first, unfaulted: the faults fall on the job's requests
        for rule in rules:
            fault_proxy.add_rule(rule)
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
        assert report.status == "ok", report.to_text()
        assert same_rows(await visible_table(client, bucket, PREFIX), original)
    bulk = verdict.supports(Capability.BULK_CONDITIONAL_DELETE)  # inputs in one DeleteObjects, else a DELETE each
    fired = [fault_proxy.fired(rule) for rule in rules]
    assert fired == [1, 1, 1, 0 if bulk else 2, int(bulk), 3, 1, 3, 1, 2]
    assert report.retries >= sum(fired)  # every fault cost an attempt, and the job still counted it
    assert report.files_after == 2
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert control_keys(s3_client, bucket) == []


async def test_a_prefix_without_permission_raises_access_denied_and_changes_nothing(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5})
    before = all_keys(s3_client, bucket)
    fault_proxy.add_rule(FaultRule(ErrorResponse(403, "AccessDenied", "Access Denied"), method="GET", path="list-type"))
    async with make_client(fault_proxy.url) as client:
        with pytest.raises(AccessDenied, match="list"):
            await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert all_keys(s3_client, bucket) == before  # the lock was released, nothing else was written
