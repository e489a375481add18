"""The commit protocol against the moto server, in-process: full runs, every state seen by readers, the lock.

Readers: ``visible_table`` is the journal-aware reader (what s3parquet does); ``plain_table`` ignores the journal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import (
    SCHEMA,
    TEST_OPTIONS,
    all_keys,
    checksum_of,
    data_keys,
    make_client,
    parquet_bytes,
    plain_table,
    rows_table,
    same_rows,
    stored_objects,
    visible_table,
    write_landing_zone,
)
from test_compact_support import (
    control_keys as support_control_keys,
)

from s3io import S3Client
from s3io.compaction import (
    CompactionOptions,
    GroupResult,
    GroupTask,
    LockHeld,
    LockLost,
    TableLock,
    compact_prefix,
    execute_group_task,
    fetch_file_facts,
    in_process_executor,
    plan_compaction,
    recover_prefix,
    rewrite_group,
)
from s3io.compaction import rewrite as rewrite_module
from s3io.compaction.errors import InputChanged, VerificationFailed
from s3io.compaction.group_commit import commit_group
from s3io.compaction.rewrite import RewriteSettings
from s3io.errors import PathNotFound
from s3io.table import conditional, layout, read_journal
from s3io.table import transaction as protocol
from s3io.table.journal import COMMITTED, DONE, PUBLISHED
from s3io.table.lock import LockInfo

pytestmark = pytest.mark.timeout(120)

PREFIX = "landing/"
URL_OF = "s3://{bucket}/landing/"


@pytest.fixture
async def client(s3_endpoint: Any) -> Any:
    async with make_client(s3_endpoint.url) as c:
        yield c


def control_keys(s3: Any, bucket: str) -> list[str]:
    return support_control_keys(s3, bucket)


# ---------------------------------------------------------------------------------------------- full runs


async def test_compaction_keeps_the_multiset_of_rows_and_leaves_fewer_files(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 7, "date=2": 6, "date=3": 2})
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "ok", report.to_text()
    assert (report.files_before, report.files_after) == (15, 4)  # 2 outputs + the 2 files of date=3 (too few)
    assert report.groups_done == 2 and report.rows_rewritten == 13 * 40
    assert [s.partition_dir for s in report.skipped_groups] == ["landing/date=3/"]
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert checksum_of(await visible_table(client, bucket, PREFIX)) == checksum_of(original)
    assert control_keys(s3_client, bucket) == []  # no staging, no journal, no lock
    outputs = [k for k in data_keys(s3_client, bucket, PREFIX) if "/part-c-" in k]
    assert len(outputs) == 2 and all(report.job_id in k for k in outputs)
    assert report.requests > 0 and report.duration_s > 0
    assert "files           15 -> 4" in report.to_text()


async def test_a_second_run_plans_nothing_and_changes_nothing(client: S3Client, s3_client: Any, bucket: str) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    url = URL_OF.format(bucket=bucket)
    assert (await compact_prefix(client, url, TEST_OPTIONS)).status == "ok"
    before = stored_objects(s3_client, bucket)
    again = await compact_prefix(client, url, TEST_OPTIONS)
    assert again.status == "nothing_to_do" and not again.plan.groups
    after = stored_objects(s3_client, bucket)
    assert after == before


async def test_dry_run_plans_and_changes_nothing(client: S3Client, s3_client: Any, bucket: str) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = all_keys(s3_client, bucket)
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS.replace(dry_run=True))
    assert report.status == "dry_run" and len(report.plan.groups) == 1
    assert "1 group(s) of 6 file(s)" in report.plan.describe()
    assert all_keys(s3_client, bucket) == before


async def test_mixed_compatible_schemas_are_unified_into_one_output(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    narrow = pa.table({"id": pa.array(range(0, 30), pa.int32()), "name": ["a"] * 30})
    wide = pa.table({"id": pa.array(range(30, 60), pa.int64()), "name": ["b"] * 30, "extra": [1.0] * 30})
    for i in range(3):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}n{i}.parquet", Body=parquet_bytes(narrow.slice(i * 10, 10)))
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}w{i}.parquet", Body=parquet_bytes(wide.slice(i * 10, 10)))
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "ok" and report.files_after == 1
    (key,) = data_keys(s3_client, bucket, PREFIX)
    table = pq.read_table(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()))
    assert table.schema.field("id").type == pa.int64()
    assert sorted(table.column("id").to_pylist()) == list(range(60))
    assert table.column("extra").null_count == 30


async def test_committed_but_unfinished_groups_are_visible_and_finished_by_recover(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    url = URL_OF.format(bucket=bucket)
    report = await compact_prefix(client, url, TEST_OPTIONS.replace(finish=False))
    assert report.status == "ok" and report.warnings
    entries = await read_journal(client, bucket, PREFIX)
    assert {e.state for e in entries} == {COMMITTED} and len(entries) == 2
    assert same_rows(await visible_table(client, bucket, PREFIX), original)
    assert report.files_after == 2  # what journal-aware readers see
    recovered = await recover_prefix(client, url, TEST_OPTIONS)
    assert recovered.status == "ok" and len(recovered.recovery.rolled_forward) == 2
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert control_keys(s3_client, bucket) == []


async def test_kept_history_entries_are_harmless_to_readers_and_to_later_runs(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    url = URL_OF.format(bucket=bucket)
    options = TEST_OPTIONS.replace(keep_history=True)
    assert (await compact_prefix(client, url, options)).status == "ok"
    assert [e.state for e in await read_journal(client, bucket, PREFIX)] == [DONE, DONE]
    more = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5}, start=10_000)
    expected = pa.concat_tables([original, more])
    second = await compact_prefix(client, url, options.replace(min_input_files=2))
    assert second.status == "ok" and second.groups_done == 1  # date=1's output and the 5 new files
    assert same_rows(await visible_table(client, bucket, PREFIX), expected)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), expected)
    assert len(await read_journal(client, bucket, PREFIX)) == 3


async def test_progress_is_reported(client: S3Client, s3_client: Any, bucket: str) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    events: list[Any] = []
    await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS, progress=events.append)
    assert events[-1].phase == "done" and events[-1].groups_done == events[-1].groups_total == 2
    assert events[-1].bytes_done == events[-1].bytes_total > 0


async def test_an_external_executor_returning_a_list_is_accepted(client: S3Client, s3_client: Any, bucket: str) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    seen: list[GroupTask] = []

    async def executor(tasks: list[GroupTask]) -> list[GroupResult]:
        seen.extend(tasks)
        return [r async for r in in_process_executor(client, 1)(tasks)]

    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS, execute_groups=executor)
    assert report.status == "ok" and len(seen) == 2
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


# ---------------------------------------------------------------------------- every state, seen by readers


async def test_readers_see_exactly_the_original_rows_after_every_protocol_step(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 3})
    expected = checksum_of(original)
    plain_duplicates: list[str] = []

    async def check(step: str) -> None:
        assert checksum_of(await visible_table(client, bucket, PREFIX)) == expected, step
        plain = plain_table(s3_client, bucket, PREFIX)
        assert plain.num_rows >= original.num_rows, step  # a plain reader never misses a row
        if plain.num_rows > original.num_rows:
            plain_duplicates.append(step)

    lock = TableLock(client, bucket, PREFIX, owner="stepper", job_id="job1", ttl=30, clock_skew=0)
    await lock.acquire()
    listing = [o async for o in client.list_objects(bucket, PREFIX)]
    facts = await fetch_file_facts(client, listing, threshold=TEST_OPTIONS.threshold)
    plan = plan_compaction(facts, TEST_OPTIONS)
    (group,) = plan.groups
    await check("start")
    output = await rewrite_group(client, group, layout.staging_key(group.partition_dir, "job1", group.group_id))
    await check("staging written and verified")
    entry = await commit_group(client, lock, job_id="job1", prefix=PREFIX, group=group, output=output)
    assert entry.state == COMMITTED
    await check("committed")
    final = await protocol.copy_to_final(client, lock, entry)
    await check("copied to the final key")
    entry = await protocol.record_published(client, lock, entry, final)
    assert entry.state == PUBLISHED
    await check("published")
    for ref in entry.inputs[:-1]:
        await conditional.delete_if_match(client, bucket, ref.key, ref.etag)
        await check(f"deleted {ref.key}")
    deletion = await protocol.delete_inputs(client, lock, entry)
    assert len(deletion.deleted) == 1 and len(deletion.already_gone) == 4 and not deletion.conflicts
    await check("all inputs deleted")
    await protocol.delete_staging(client, lock, entry)
    await check("staging deleted")
    entry = await protocol.record_done(client, lock, entry)
    assert entry.state == DONE
    await check("done")
    await protocol.forget(client, lock, entry)
    await check("journal entry deleted")
    await lock.release()
    # The documented plain-reader window: from the copy to the last input delete, and nowhere else.
    assert plain_duplicates == ["copied to the final key", "published"] + [
        f"deleted {ref.key}" for ref in entry.inputs[:-1]
    ]
    assert control_keys(s3_client, bucket) == []


async def test_a_reader_looping_during_compaction_always_sees_the_exact_rows(
    s3_endpoint: Any, client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6}, rows_per_file=20)
    expected = checksum_of(original)
    options = TEST_OPTIONS.replace(grace_period=0.6)
    job = asyncio.create_task(compact_prefix(client, URL_OF.format(bucket=bucket), options))
    observed = 0
    async with make_client(s3_endpoint.url) as reader:
        while not job.done():
            assert checksum_of(await visible_table(reader, bucket, PREFIX)) == expected
            observed += 1
    assert (await job).status == "ok"
    assert observed >= 2  # it read while the job ran (each protocol step alone: the test above)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_reader_of_one_partition_honours_a_compaction_rooted_above_it(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS.replace(finish=False))
    partition = f"{PREFIX}date=1/"
    visible = await visible_table(client, bucket, partition)
    assert sorted(visible.column("id").to_pylist()) == list(range(200))


async def test_an_input_replaced_before_deletion_is_left_in_place_and_reported(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    url = URL_OF.format(bucket=bucket)
    await compact_prefix(client, url, TEST_OPTIONS.replace(finish=False))
    replaced = f"{PREFIX}part-00002.parquet"
    s3_client.put_object(Bucket=bucket, Key=replaced, Body=parquet_bytes(rows_table(1000, 3)))
    report = await recover_prefix(client, url, TEST_OPTIONS)
    assert report.status == "ok"
    assert any(replaced in c and "left in place" in c for c in report.conflicts)
    assert replaced in data_keys(s3_client, bucket, PREFIX)  # never delete data we did not compact
    ids = sorted(plain_table(s3_client, bucket, PREFIX).column("id").to_pylist())
    assert ids == [*range(200), 1000, 1001, 1002]


async def _publish_one_group(client: S3Client, bucket: str) -> Any:
    """Drive one group to "published" by hand, then let the job "die" (release the lock, delete nothing)."""
    lock = TableLock(client, bucket, PREFIX, owner="stepper", job_id="job1", ttl=30, clock_skew=0)
    await lock.acquire()
    listing = [o async for o in client.list_objects(bucket, PREFIX)]
    (group,) = plan_compaction(await fetch_file_facts(client, listing, threshold=1 << 30), TEST_OPTIONS).groups
    output = await rewrite_group(client, group, layout.staging_key(group.partition_dir, "job1", group.group_id))
    entry = await commit_group(client, lock, job_id="job1", prefix=PREFIX, group=group, output=output)
    entry = await protocol.record_published(client, lock, entry, await protocol.copy_to_final(client, lock, entry))
    await lock.release()
    return entry


async def test_recovery_publishes_again_when_a_published_output_disappeared(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    entry = await _publish_one_group(client, bucket)
    s3_client.delete_object(Bucket=bucket, Key=entry.final.key)
    report = await recover_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "ok" and not report.recovery.errors
    assert data_keys(s3_client, bucket, PREFIX) == [entry.final_key]
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert control_keys(s3_client, bucket) == []


async def test_recovery_never_deletes_inputs_whose_output_is_gone(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    entry = await _publish_one_group(client, bucket)
    s3_client.delete_object(Bucket=bucket, Key=entry.final.key)
    s3_client.delete_object(Bucket=bucket, Key=entry.staging.key)
    report = await recover_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "partial" and "need a person" in report.message
    assert report.recovery.errors and "left in place" in report.recovery.errors[0]
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)  # every input is still there
    assert [e.state for e in await read_journal(client, bucket, PREFIX)] == [PUBLISHED]  # kept for inspection
    again = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert again.status == "refused" and "need a person" in again.message
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


# ------------------------------------------------------------------------------------------- group rewrite


async def test_rewrite_streams_through_a_multipart_upload_and_verifies_by_row_group(
    client: S3Client, s3_client: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    tables = [
        pa.table({"id": pa.array(range(i * 4, i * 4 + 4), pa.int64()), "blob": [os.urandom(400_000) for _ in range(4)]})
        for i in range(6)
    ]  # ~9.6 MB of incompressible data: two 5 MiB parts
    for i, table in enumerate(tables):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}f{i}.parquet", Body=parquet_bytes(table))
    listing = [o async for o in client.list_objects(bucket, PREFIX)]
    plan = plan_compaction(await fetch_file_facts(client, listing, threshold=1 << 30), CompactionOptions())
    (group,) = plan.groups
    monkeypatch.setattr(rewrite_module, "WHOLE_OBJECT_VERIFY_BYTES", 0)  # read back a row group at a time
    before = client.stats()
    settings = RewriteSettings(part_size=5 * 1024 * 1024, row_group_bytes=2_000_000, prefetch_bytes=1_000_000)
    output = await rewrite_group(client, group, f"{PREFIX}_s3io_staging/x/g.parquet", settings=settings)
    spent = client.stats() - before
    assert spent.requests_for("upload_part") >= 2
    assert output.rows == 24 and output.staging.size > 9_000_000
    metadata = pq.read_metadata(
        pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=output.staging.key)["Body"].read())
    )
    assert metadata.num_row_groups >= 3


def test_a_group_task_pickles_and_runs_synchronously_with_its_own_client(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    import pickle

    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5})

    async def plan() -> Any:
        async with make_client(s3_endpoint.url) as c:
            listing = [o async for o in c.list_objects(bucket, PREFIX)]
            return plan_compaction(await fetch_file_facts(c, listing, threshold=1 << 30), TEST_OPTIONS)

    (group,) = asyncio.run(plan()).groups
    task = pickle.loads(pickle.dumps(GroupTask("job9", group, RewriteSettings())))  # as a Spark task receives it
    result = execute_group_task(task, lambda: make_client(s3_endpoint.url))
    assert result.error is None and result.output is not None
    assert result.output.rows == original.num_rows and result.output.requests >= 7  # 5 GETs, 1 PUT, 1 read-back
    assert result.output.staging.key.startswith(f"{PREFIX}_s3io_staging/job9/g00000-")
    assert pickle.loads(pickle.dumps(result)) == result


async def test_a_changed_input_aborts_the_group_and_leaves_no_staging(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    listing = [o async for o in client.list_objects(bucket, PREFIX)]
    (group,) = plan_compaction(await fetch_file_facts(client, listing, threshold=1 << 30), TEST_OPTIONS).groups
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}part-00003.parquet", Body=parquet_bytes(rows_table(500, 1)))
    with pytest.raises(InputChanged, match="part-00003"):
        await rewrite_group(client, group, f"{PREFIX}_s3io_staging/x/g.parquet")
    assert control_keys(s3_client, bucket) == []


async def test_an_output_that_fails_verification_is_deleted_and_never_committed(
    client: S3Client, s3_client: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    real = rewrite_module._read_back

    async def lossy(*args: Any) -> Any:
        checksum = await real(*args)
        checksum.rows -= 1
        return checksum

    monkeypatch.setattr(rewrite_module, "_read_back", lossy)
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "partial"
    assert "VerificationFailed" in report.groups[0].error and "row count" in report.groups[0].error
    assert control_keys(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert VerificationFailed.__name__ in report.to_text()


async def test_spark_int96_timestamps_come_out_as_microseconds_and_nanoseconds_are_never_truncated(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    micros = pa.table({"ts": pa.array([i * 1_000_000_000 + 1000 for i in range(10)], pa.timestamp("ns"))})
    for i in range(5):  # as Spark writes them by default (spark.sql.parquet.outputTimestampType=INT96)
        body = parquet_bytes(micros.slice(i * 2, 2), use_deprecated_int96_timestamps=True)
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}a/f{i}.parquet", Body=body)
    nanos = pa.table({"ts": pa.array([i + 1 for i in range(10)], pa.timestamp("ns"))})
    for i in range(5):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}b/f{i}.parquet", Body=parquet_bytes(nanos.slice(i * 2, 2)))
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "partial"
    (failed,) = [g for g in report.groups if g.state == "failed"]
    assert failed.partition_dir == f"{PREFIX}b/" and "would lose data" in failed.error
    assert "coerce_timestamps=None" in failed.error
    (output,) = data_keys(s3_client, bucket, f"{PREFIX}a/")
    body = s3_client.get_object(Bucket=bucket, Key=output)["Body"].read()
    column = pq.read_metadata(pa.BufferReader(body)).schema.column(0)
    assert "timeUnit=microseconds" in str(column.logical_type)
    values = pq.read_table(pa.BufferReader(body)).column("ts").cast(pa.timestamp("ns")).to_pylist()
    assert sorted(values) == micros.column("ts").to_pylist()
    assert len(data_keys(s3_client, bucket, f"{PREFIX}b/")) == 5  # the failed group changed nothing


# ------------------------------------------------------------------------------------------------ the lock


async def test_two_concurrent_compactions_one_commits_the_other_stops_cleanly(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    url = URL_OF.format(bucket=bucket)
    async with make_client(s3_endpoint.url) as a, make_client(s3_endpoint.url) as b:
        reports = await asyncio.gather(
            compact_prefix(a, url, TEST_OPTIONS.replace(owner="job-A", grace_period=0.5)),
            compact_prefix(b, url, TEST_OPTIONS.replace(owner="job-B", grace_period=0.5)),
        )
    statuses = sorted(r.status for r in reports)
    assert statuses == ["locked", "ok"], [r.to_text() for r in reports]
    winner = next(r for r in reports if r.status == "ok")
    loser = next(r for r in reports if r.status == "locked")
    assert winner.groups_done == 2 and loser.groups_done == 0 and not loser.groups
    assert "table lock of" in loser.message and "is held by job-" in loser.message and "until 20" in loser.message
    assert winner.job_id in loser.message
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert len(data_keys(s3_client, bucket, PREFIX)) == 2


def _lock_of(owner: str, job_id: str, ttl: float) -> bytes:
    """The body another job's table lock has (a lease of ``ttl`` from its Last-Modified)."""
    return LockInfo(owner=owner, ttl=ttl, job_id=job_id, acquired_at=time.time()).encode()


async def test_a_live_lock_blocks_and_changes_nothing(client: S3Client, s3_client: Any, bucket: str) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=_lock_of("other-host:42", "J", 600))
    before = stored_objects(s3_client, bucket)
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "locked" and "other-host:42 (job J)" in report.message
    assert stored_objects(s3_client, bucket) == before


async def test_an_expired_lock_is_taken_over(client: S3Client, s3_client: Any, bucket: str) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=_lock_of("dead-host:1", "D", 0))
    await asyncio.sleep(2.5)  # ttl 0 + Last-Modified's whole second (+ resolution): ended on the store's clock
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "ok" and report.lock_taken_over_from == "dead-host:1 (job D)"
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert control_keys(s3_client, bucket) == []


async def test_of_two_jobs_racing_for_an_expired_lock_exactly_one_wins(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=_lock_of("dead", "D", 0))
    await asyncio.sleep(2.5)  # ttl 0 + Last-Modified's whole second (+ resolution): ended on the store's clock
    async with make_client(s3_endpoint.url) as a, make_client(s3_endpoint.url) as b:
        locks = [TableLock(c, bucket, PREFIX, owner=o, job_id=o, ttl=30, clock_skew=0) for c, o in ((a, "A"), (b, "B"))]
        results = await asyncio.gather(*(lock.acquire() for lock in locks), return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["LockHeld", "LockInfo"]
        winner = next(lock for lock, r in zip(locks, results, strict=True) if not isinstance(r, BaseException))
        await winner.release()
    assert control_keys(s3_client, bucket) == []


async def test_the_holder_renews_and_fencing_detects_a_stolen_lock(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    lock = TableLock(client, bucket, PREFIX, owner="me", job_id="J", ttl=3.0, clock_skew=0)
    async with lock:
        first = lock.info
        for _ in range(100):  # renewed every ttl/3: polled, at most 10 s
            if lock.info.etag != first.etag:
                break
            await asyncio.sleep(0.1)
        assert lock.info.etag != first.etag and lock.info.written_at > first.written_at
        await lock.ensure_held()
        other = TableLock(client, bucket, PREFIX, owner="other", job_id="K", ttl=30, clock_skew=0)
        with pytest.raises(LockHeld):
            await other.acquire()
        s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=b'{"owner": "thief"}')
        with pytest.raises(LockLost):
            await lock.ensure_held()
    assert s3_client.get_object(Bucket=bucket, Key=layout.lock_key(PREFIX))["Body"].read() == b'{"owner": "thief"}'


async def test_a_job_that_loses_its_lock_stops_before_committing(client: S3Client, s3_client: Any, bucket: str) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    url = URL_OF.format(bucket=bucket)

    async def steal_then_run(tasks: list[GroupTask]) -> Any:
        s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=_lock_of("thief", "T", 600))
        async for result in in_process_executor(client, 2)(tasks):
            yield result

    report = await compact_prefix(client, url, TEST_OPTIONS, execute_groups=steal_then_run)
    assert report.status == "lock_lost" and "taken over" in report.message
    assert await read_journal(client, bucket, PREFIX) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    s3_client.delete_object(Bucket=bucket, Key=layout.lock_key(PREFIX))  # the thief goes away
    again = await compact_prefix(client, url, TEST_OPTIONS)
    assert again.status == "ok"
    assert control_keys(s3_client, bucket) == []  # the first job's uncommitted staging was rolled back
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_compaction_rooted_below_blocks_one_rooted_above(client: S3Client, s3_client: Any, bucket: str) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    child = f"s3://{bucket}/{PREFIX}date=1/"
    await compact_prefix(client, child, TEST_OPTIONS.replace(finish=False))
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "refused" and f"{PREFIX}date=1/" in report.message
    assert (await recover_prefix(client, child, TEST_OPTIONS)).status == "ok"
    assert (await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)).status == "ok"


# ---------------------------------------------------------------------------------------------- bad inputs


async def test_bad_inputs_get_clear_report_entries_and_are_left_untouched(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5})
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}date=1/notes.txt", Body=b"not parquet at all")
    corrupt = bytearray(parquet_bytes(rows_table(5000, 40)))
    corrupt[4:64] = b"\xff" * 60  # the first page header: the footer still parses
    corrupt_key = f"{PREFIX}date=2/part-99999.parquet"
    s3_client.put_object(Bucket=bucket, Key=corrupt_key, Body=bytes(corrupt))
    conflicting = pa.table({"id": ["x", "y"], "name": ["a", "b"]})
    for i in range(2):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}date=1/str-{i}.parquet", Body=parquet_bytes(conflicting))
    date2_before = data_keys(s3_client, bucket, f"{PREFIX}date=2/")
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    text = report.to_text()
    assert report.status == "partial", text
    skipped = {f.key: f.reason for f in report.skipped_files}
    assert "not a parquet file" in skipped[f"{PREFIX}date=1/notes.txt"]
    (conflict,) = [g for g in report.skipped_groups if g.partition_dir == f"{PREFIX}date=1/"]
    assert "incompatible schemas" in conflict.reason and "'id'" in conflict.reason
    (failed,) = [g for g in report.groups if g.state == "failed"]
    assert failed.partition_dir == f"{PREFIX}date=2/" and "CorruptFile" in failed.error and corrupt_key in failed.error
    assert data_keys(s3_client, bucket, f"{PREFIX}date=2/") == date2_before  # the failed group changed nothing
    assert f"{PREFIX}date=1/notes.txt" in data_keys(s3_client, bucket, PREFIX)
    assert control_keys(s3_client, bucket) == []
    readable = [k for k in data_keys(s3_client, bucket, PREFIX) if k.endswith(".parquet") and k != corrupt_key]
    ids = []
    for key in readable:
        table = pq.read_table(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()))
        if table.schema.field("id").type == pa.int64():
            ids.extend(table.column("id").to_pylist())
    assert sorted(ids) == sorted(original.column("id").to_pylist())


@pytest.mark.parametrize("dry_run", [False, True])
async def test_a_prefix_with_no_objects_is_path_not_found_and_leaves_nothing_behind(
    client: S3Client, s3_client: Any, bucket: str, dry_run: bool
) -> None:
    """As a reader of it: a typo in a scheduled job's URL fails the job (it used to report nothing to do)."""
    url = URL_OF.format(bucket=bucket)
    with pytest.raises(PathNotFound, match=f"Path does not exist: {url}"):
        await compact_prefix(client, url, TEST_OPTIONS.replace(dry_run=dry_run))
    assert all_keys(s3_client, bucket) == []


async def test_a_prefix_holding_only_non_data_objects_reports_nothing_to_do(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}_SUCCESS", Body=b"")
    report = await compact_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert report.status == "nothing_to_do" and report.files_before == 0 and report.files_after == 0
    assert list(stored_objects(s3_client, bucket)) == [f"{PREFIX}_SUCCESS"]


def test_schema_of_the_support_table_is_stable() -> None:
    assert rows_table(0, 3).schema == SCHEMA


async def test_recovery_aborts_a_staging_upload_a_killed_job_left_and_spares_other_uploads(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    """A job killed mid-upload leaves an unfinished multipart upload of its staging key: no object, but stored
    parts. The next run aborts it; an upload of anyone else's key under the prefix is left alone."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 3})
    staging_key = f"{PREFIX}date=1/_s3io_staging/job-killed/g0-0123abcd.parquet"
    user_key = f"{PREFIX}date=1/someone-elses-upload.parquet"
    for key in (staging_key, user_key):
        upload_id = s3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        s3_client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p" * 1024)
    recovered = await recover_prefix(client, URL_OF.format(bucket=bucket), TEST_OPTIONS)
    assert recovered.status == "ok"
    assert recovered.recovery.uploads_aborted == [staging_key]
    assert "1 unfinished staging upload(s) aborted" in recovered.recovery.describe()
    remaining = [u["Key"] for u in s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    assert remaining == [user_key]
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


def test_a_journal_entry_is_stored_in_its_documented_json_and_reads_back_equal() -> None:
    import dataclasses

    from s3io.table.journal import JournalEntry, ObjectRef

    entry = JournalEntry(
        job_id="j1",
        group_id="g00001",
        state="committed",
        bucket="b",
        prefix="t/",
        partition_dir="t/d=1/",
        inputs=(ObjectRef("t/d=1/a.parquet", '"e1"', 10), ObjectRef("t/d=1/b.parquet", None, 20)),
        staging=ObjectRef("t/d=1/_s3io_staging/x", '"s"', 30),
        final_key="t/d=1/part-c-j1-g00001.parquet",
        rows=5,
        checksums={"__row__": "00000000000000ff"},
        committed_at=1.5,
        owner="o",
        write_id="w",
        etag='"journal-etag"',  # describes the journal object: not stored
        stored_at=9.0,
    )
    body = entry.encode()
    assert body == (
        b'{"bucket":"b","checksums":{"__row__":"00000000000000ff"},"committed_at":1.5,"done_at":null,'
        b'"final":null,"final_key":"t/d=1/part-c-j1-g00001.parquet","group_id":"g00001",'
        b'"inputs":[{"etag":"\\"e1\\"","key":"t/d=1/a.parquet","size":10},{"etag":null,"key":"t/d=1/b.parquet",'
        b'"size":20}],"job_id":"j1","owner":"o","partition_dir":"t/d=1/","prefix":"t/","published_at":null,'
        b'"rows":5,"staging":{"etag":"\\"s\\"","key":"t/d=1/_s3io_staging/x","size":30},"state":"committed",'
        b'"version":1,"write_id":"w"}'
    )
    back = JournalEntry.decode(body, etag='"journal-etag"', url="s3://b/t/_s3io_table/journal/x")
    assert back == dataclasses.replace(entry, stored_at=None)


def test_the_grace_before_publishing_never_compares_two_machines_clocks() -> None:
    """On the store's clock when the journal object's time is known; on our clock for our own entry; and for
    another job's entry whose store time is unknown (it changed between listing and reading), the whole grace:
    that job's committed_at (here 1,000 s behind ours) says nothing on our clock."""
    from s3io.table.transaction import STORE_CLOCK_RESOLUTION, _until_published

    ours_now, store_now, grace = 5_000.0, 7_000.0, 60.0
    theirs = _entry_of("j-other", committed_at=ours_now - 1_000.0)
    assert _until_published(theirs, grace, lambda: ours_now, lambda: store_now, "j-me") == grace
    stored = dataclasses.replace(theirs, stored_at=store_now - 20.0)
    assert _until_published(stored, grace, lambda: ours_now, lambda: store_now, "j-me") == pytest.approx(
        grace - 20.0 + STORE_CLOCK_RESOLUTION
    )
    mine = _entry_of("j-me", committed_at=ours_now - 50.0)
    assert _until_published(mine, grace, lambda: ours_now, lambda: store_now, "j-me") == pytest.approx(10.0)


def _entry_of(job_id: str, committed_at: float) -> Any:
    from s3io.table.journal import JournalEntry, ObjectRef

    return JournalEntry(
        job_id=job_id,
        group_id="g00000",
        state="committed",
        bucket="b",
        prefix="t/",
        partition_dir="t/",
        inputs=(ObjectRef("t/a.parquet", '"e"', 10),),
        staging=ObjectRef("t/_s3io_staging/x", '"s"', 10),
        final_key="t/part-c-x-g00000.parquet",
        committed_at=committed_at,
    )


async def test_an_unreadable_lock_says_to_delete_it_instead_of_promising_a_takeover(
    client: S3Client, s3_client: Any, bucket: str
) -> None:
    """An unreadable lock object has no expiry that can be judged, so it is never taken over: the error says so and
    names the object to delete (it used to say "until unknown; retry after that time")."""
    s3_client.put_object(Bucket=bucket, Key=layout.lock_key(PREFIX), Body=b"{not a lock")
    lock = TableLock(client, bucket, PREFIX, owner="me", job_id="J", ttl=3.0, clock_skew=0)
    with pytest.raises(LockHeld, match=r"cannot be judged.*never taken over.*delete s3://.*/_s3io_table/LOCK"):
        await lock.acquire()


def test_the_command_line_exits_1_on_a_prefix_with_no_objects_and_its_help_says_the_wait_is_twice(
    s3_endpoint: Any, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_ext.compact.__main__ import main

    url = URL_OF.format(bucket=bucket)
    assert main(["--master", "none", "--no-progress", "--endpoint-url", s3_endpoint.url, url]) == 1
    assert f"compact: PathNotFound: Path does not exist: {url}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "waits it twice" in help_text and "plus twice the grace period" in help_text, help_text
