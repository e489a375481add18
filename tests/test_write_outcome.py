"""A write's outcome is the truth (issue 38 item 7, the s3io side): uploads aborted under a writer before its commit
point fail the write with no entry left; a committed entry whose uploads are all gone is rolled back by recovery
instead of blocking the prefix; a failure after the commit point says the rows ARE committed, with the job id."""

from __future__ import annotations

from typing import Any

import pytest
from test_compact_support import make_client
from test_write_support import SCHEMA, TEST_WRITE, control_keys, plain_ids, rows, run_task, uploads_left, visible_ids

from s3io.compaction import CompactionOptions, recover_prefix
from s3io.table import journal, layout
from s3io.table.write_protocol import CommittedNotFinished, UploadsGone, recover_writes
from s3io.write import WriteSpec, commit_write, write_parquet_async
from testbed.faultproxy import ErrorResponse, FaultRule

pytestmark = pytest.mark.timeout(120)
PREFIX = "outcome/"
RECOVERY = CompactionOptions(grace_period=0.2, lease_ttl=5.0, clock_skew=0.0, owner="next")


def _spec(bucket: str, **changes: Any) -> WriteSpec:
    return WriteSpec(bucket, PREFIX, layout.new_job_id(), SCHEMA, TEST_WRITE.replace(**changes))


def _abort(s3: Any, bucket: str, files: Any) -> None:
    for file in files:
        s3.abort_multipart_upload(Bucket=bucket, Key=file.key, UploadId=file.upload_id)


async def test_uploads_aborted_before_the_commit_point_fail_the_write_and_leave_no_entry(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    await write_parquet_async(rows(0, 100), url, endpoint_url=s3_endpoint.url, grace_period=0.2, clock_skew=0.0)
    spec = _spec(bucket, partition_by=("day",))
    async with make_client(s3_endpoint.url) as client:
        output = await run_task(client, spec, rows(1000, 300))
        _abort(s3_client, bucket, output.files[:1])  # another writer's recovery took it for abandoned
        with pytest.raises(UploadsGone, match=rf"write {spec.job_id}: the uploads of 1 of its 3 file\(s\) are gone"):
            await commit_write(client, spec, [output])
    assert not [k for k in control_keys(s3_client, bucket, PREFIX, "writes") if spec.job_id in k]
    assert uploads_left(s3_client, bucket) == [] and plain_ids(s3_client, bucket, PREFIX) == list(range(100))
    again = await write_parquet_async(
        rows(2000, 50), url, endpoint_url=s3_endpoint.url, mode="overwrite", grace_period=0.2, clock_skew=0.0
    )
    assert again.status == "committed" and await visible_ids(s3_endpoint.url, url) == list(range(2000, 2050))


async def test_a_committed_entry_whose_uploads_are_gone_is_rolled_back_and_the_prefix_stays_writable(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    await write_parquet_async(rows(0, 100), url, endpoint_url=s3_endpoint.url, grace_period=0.2, clock_skew=0.0)
    spec = _spec(bucket)
    async with make_client(s3_endpoint.url) as client:
        output = await run_task(client, spec, rows(1000, 100))
        claim = await journal.create(
            client,
            journal.WriteEntry(
                job_id=spec.job_id, state=journal.PENDING, bucket=bucket, prefix=PREFIX, files=output.files
            ),
        )
        await journal.advance(client, claim, state=journal.COMMITTED)  # its driver died right after the commit point
        _abort(s3_client, bucket, output.files)  # and then its uploads were aborted (a lifecycle rule)

        async def store_now() -> float:
            return float("inf")

        report = await recover_writes(client, bucket, PREFIX, store_now=store_now, grace_period=0.2, clock_skew=0.0)
        assert report.rolled_back == [spec.job_id] and not report.errors, report.describe()
        assert await visible_ids(s3_endpoint.url, url) == list(range(100))
        recovered = await recover_prefix(client, url, RECOVERY)
        assert recovered.status == "ok", recovered.to_text()
    assert not [k for k in control_keys(s3_client, bucket, PREFIX, "writes") if spec.job_id in k]
    again = await write_parquet_async(
        rows(2000, 50), url, endpoint_url=s3_endpoint.url, mode="overwrite", grace_period=0.2, clock_skew=0.0
    )
    assert again.status == "committed" and plain_ids(s3_client, bucket, PREFIX) == list(range(2000, 2050))


async def test_a_failure_after_the_commit_point_says_the_rows_are_committed_with_the_job_id(
    fault_proxy: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Every CompleteMultipartUpload refused (403, not retried) right after the commit point: the error says the write
    IS committed and names the job; the next recovery finishes it, and every row is there once."""
    url = f"s3://{bucket}/{PREFIX}"
    spec = _spec(bucket)
    async with make_client(fault_proxy.url) as client:
        output = await run_task(client, spec, rows(0, 200))
        refused = ErrorResponse(403, "AccessDenied", "Access Denied")
        rule = fault_proxy.add_rule(
            FaultRule(refused, method="POST", predicate=lambda r: "uploadId=" in r.query and "/probe/" not in r.path)
        )
        with pytest.raises(CommittedNotFinished, match=rf"write {spec.job_id} to {url} IS committed") as raised:
            await commit_write(client, spec, [output])
        assert "Do not retry an append" in str(raised.value) and fault_proxy.fired(rule) >= 1
    async with make_client(s3_endpoint.url) as client:
        recovered = await recover_prefix(client, url, RECOVERY)
    assert recovered.status == "ok" and recovered.recovery is not None, recovered.to_text()
    assert spec.job_id in recovered.recovery.writes.rolled_forward
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(200)) and uploads_left(s3_client, bucket) == []
