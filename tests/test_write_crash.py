"""Crash injection: the committing process SIGKILLs itself at every step of the write commit, in a subprocess; and
a task killed mid-upload, then retried.

For each step, appending and overwriting: before any recovery a journal-aware reader sees the old rows until the
crash point is past the publish, and the new ones after it (never a mix); after the next run on the prefix (the
compaction's ``--recover``) every reader, journal-aware or plain, sees the old rows if the crash came before the
commit point and the new ones if it came after, no multipart upload is left and no write entry remains.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pyarrow as pa
import pytest
from test_compact_support import make_client, run_script
from test_write_support import control_keys, plain_ids, rows, run_write_until_killed, uploads_left, visible_ids

from s3io.compaction import CompactionOptions, recover_prefix
from s3io.table import layout
from s3io.table.crash import WRITE_POINTS
from s3io.write import CrashPoint, TaskWriter, WriteOptions, WriteSpec, commit_write, write_parquet_async

PREFIX = "zone/"
OPTIONS = {"grace_period": 0.2, "lease_ttl": 2.0, "clock_skew": 0.0, "partition_by": ["day"]}
RECOVERY = CompactionOptions(grace_period=0.2, lease_ttl=5.0, clock_skew=0.0, abandon_uploads_after=0.0, owner="next")
BEFORE_COMMIT = {CrashPoint.BEFORE_CLAIM, CrashPoint.AFTER_CLAIM}
PUBLISHED = {
    CrashPoint.AFTER_PUBLISH,
    CrashPoint.AFTER_FIRST_RETIRE,
    CrashPoint.AFTER_RETIRE,
    CrashPoint.BEFORE_RETURN,
}
RETIRE_POINTS = (CrashPoint.AFTER_FIRST_RETIRE, CrashPoint.AFTER_RETIRE)  # an overwrite's only
COMMIT_POINTS = [p for p in WRITE_POINTS if p is not CrashPoint.TASK_AFTER_PART]
CASES = [("append", p) for p in COMMIT_POINTS if p not in RETIRE_POINTS] + [("overwrite", p) for p in COMMIT_POINTS]


async def recover_until_clean(client: Any, s3: Any, bucket: str, url: str) -> Any:
    """Run --recover until the dead writer's claim and lock (an overwrite's) have ended and everything is finished
    (bounded)."""
    for _ in range(40):
        report = await recover_prefix(client, url, RECOVERY)
        assert report.status in ("ok", "locked"), report.to_text()
        if report.status == "ok" and not control_keys(s3, bucket, PREFIX, "writes") and not uploads_left(s3, bucket):
            return report
        await asyncio.sleep(0.25)
    raise AssertionError(f"recovery never finished: {report.to_text()}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("mode", "crash_at"), CASES, ids=[f"{m}-{p.value}" for m, p in CASES])
async def test_sigkill_at_every_commit_step_loses_and_duplicates_nothing(
    mode: str, crash_at: CrashPoint, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    await write_parquet_async(rows(0, 300), url, endpoint_url=s3_endpoint.url, partition_by="day", grace_period=0)
    old, new = list(range(300)), list(range(1000, 1600))
    result = run_write_until_killed(s3_endpoint.url, url, crash_at.value, {**OPTIONS, "mode": mode}, (1000, 600))
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stdout, result.stderr[-2000:])

    after = sorted(old + new) if mode == "append" else new
    seen_now = await visible_ids(s3_endpoint.url, url)
    assert seen_now == (after if crash_at in PUBLISHED else old)

    async with make_client(s3_endpoint.url) as client:
        report = await recover_until_clean(client, s3_client, bucket, url)
    final = old if crash_at in BEFORE_COMMIT else after
    assert await visible_ids(s3_endpoint.url, url) == final
    assert plain_ids(s3_client, bucket, PREFIX) == final
    assert uploads_left(s3_client, bucket) == []
    assert report.recovery is not None and not report.recovery.errors


KILLED_TASK = """
import asyncio, os, sys
import pyarrow as pa
from s3io import Policy
from s3io.store import StoreConfig
from s3io.write import TaskWriter, WriteOptions, WriteSpec

endpoint, bucket, prefix, job = sys.argv[1:5]

async def main():
    store = StoreConfig(endpoint=endpoint, policy=Policy(backoff_base=0.001, backoff_cap=0.05))
    table = pa.table({"id": range(200_000), "blob": [os.urandom(64) for _ in range(200_000)]})
    spec = WriteSpec(bucket, prefix, job, table.schema, WriteOptions(part_size=5 << 20, row_group_bytes=4 << 20))
    async with store.client() as client:
        async with TaskWriter(client, spec, 7, crash_at="task_after_part") as writer:
            await writer.write_all(table.to_batches(max_chunksize=20_000))

asyncio.run(main())
"""


async def test_a_task_killed_mid_upload_is_retried_and_committed_once(
    s3_endpoint: Any, s3_client: Any, bucket: str, moto_server: Any
) -> None:
    job = layout.new_job_id()
    killed = run_script([KILLED_TASK, s3_endpoint.url, bucket, PREFIX, job], 120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    cut = moto_server.front.take_rejections() if moto_server.front else []
    assert all(r.body_cut and job in r.path for r in cut), cut  # only the body the kill cut short is refused
    (dead_upload,) = uploads_left(s3_client, bucket)  # the attempt's one upload, a part of it up
    assert job in dead_upload
    table = pa.table({"id": range(1000), "blob": [bytes(8)] * 1000})
    spec = WriteSpec(bucket, PREFIX, job, table.schema, WriteOptions(grace_period=0.2))
    async with make_client(s3_endpoint.url) as client:
        async with TaskWriter(client, spec, 7) as retry:  # Spark's next attempt of task 7: same names, new uploads
            output = await retry.write_all(table.to_batches())
        assert output.files[0].key == dead_upload and len(uploads_left(s3_client, bucket)) == 2
        await commit_write(client, spec, [output])
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(1000))
    assert uploads_left(s3_client, bucket) == []
