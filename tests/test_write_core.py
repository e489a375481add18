"""The write core against the S3 server: files right-sized and invisible until the commit, then visible at once;
overwrites (static and dynamic); failed jobs, retried and speculative task attempts, stream micro-batches replayed,
concurrent writers and a compaction beside them: every row exactly once and no multipart upload left."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import FAST_POLICY, data_keys, make_client
from test_write_support import (
    SCHEMA,
    TEST_WRITE,
    control_keys,
    plain_ids,
    rows,
    run_task,
    uploads_left,
    visible_ids,
)

from s3io.compaction import CompactionOptions, compact_prefix, recover_prefix
from s3io.errors import InvalidConfig, SchemaMismatch
from s3io.table import journal, layout
from s3io.table.write_names import stream_job_id
from s3io.table.write_protocol import recover_writes
from s3io.write import TaskWriter, WriteSpec, abort_write, commit_write, write_parquet_async
from s3io.write.spark_schema import ROW_METADATA_KEY, VERSION_KEY

pytestmark = pytest.mark.timeout(120)
PREFIX = "events/"


def spec_for(bucket: str, **changes: Any) -> WriteSpec:
    return WriteSpec(bucket, PREFIX, layout.new_job_id(), SCHEMA, TEST_WRITE.replace(**changes))


async def write(endpoint: str, bucket: str, table: pa.Table, **options: Any) -> Any:
    options = {"grace_period": 0.2, "lease_ttl": 3.0, "clock_skew": 0.0, **options}
    return await write_parquet_async(
        table, f"s3://{bucket}/{PREFIX}", endpoint_url=endpoint, policy=FAST_POLICY, **options
    )


async def test_a_partitioned_write_reads_back_exactly_and_leaves_no_upload(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    table = rows(0, 3000)
    report = await write(s3_endpoint.url, bucket, table, partition_by="day")
    assert report.status == "committed" and report.rows == 3000 and len(report.files) == 3
    keys = data_keys(s3_client, bucket, PREFIX)
    assert sorted({k.split("/")[1] for k in keys}) == ["day=2024-06-01", "day=2024-06-02", "day=2024-06-03"]
    assert all(k.rsplit("/", 1)[-1].startswith(f"part-00000-{report.job_id}-c") for k in keys)
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/{PREFIX}") == list(range(3000))
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(3000))
    footer = pq.ParquetFile(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()))
    assert footer.schema_arrow.names == ["id", "text"]  # the partition column lives in the path only
    assert footer.metadata.metadata[VERSION_KEY] == b"3.1.0"
    assert b'"name":"text","type":"string"' in footer.metadata.metadata[ROW_METADATA_KEY]
    assert uploads_left(s3_client, bucket) == []


async def test_files_are_rolled_at_the_target_never_more_than_one_row_group_over(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    target = 5 * 1024 * 1024  # the smallest target allowed
    noise = pa.array([os.urandom(200).hex() for _ in range(60_000)])  # ~24 MB that snappy cannot shrink
    table = rows(0, 60_000, days=1).set_column(2, "text", noise)
    report = await write(s3_endpoint.url, bucket, table, target_file_size=target, row_group_bytes=1024 * 1024)
    sizes = sorted(size for _, size, _ in report.files)
    assert len(sizes) >= 4, sizes
    for key, size, _ in report.files:
        metadata = pq.ParquetFile(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())).metadata
        largest_group = max(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
        assert size <= target + largest_group, (size, largest_group)
    assert all(size >= 0.6 * target for size in sizes[1:]), sizes  # all but the last are near the target
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/{PREFIX}") == list(range(60_000))


async def test_nothing_is_visible_before_the_commit_and_everything_after(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    spec = spec_for(bucket, partition_by=("day",))
    async with make_client(s3_endpoint.url) as client:
        outputs = [await run_task(client, spec, rows(0, 500), 0), await run_task(client, spec, rows(500, 500), 1)]
        assert len(uploads_left(s3_client, bucket)) == 6
        assert data_keys(s3_client, bucket, PREFIX) == []  # no reader, plain or not, can see a file yet
        assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/{PREFIX}") == []
        report = await commit_write(client, spec, outputs)
    assert report.rows == 1000 and len(report.files) == 6
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/{PREFIX}") == list(range(1000))
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(1000))
    assert uploads_left(s3_client, bucket) == []
    assert len(control_keys(s3_client, bucket, PREFIX, "writes")) == 1  # forgotten by a later run, after the grace


async def test_overwrite_replaces_the_prefix_and_dynamic_overwrite_only_the_partitions_written(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    await write(s3_endpoint.url, bucket, rows(0, 300), partition_by="day")
    dynamic = rows(1000, 10, days=1)  # day 2024-06-01 only
    report = await write(
        s3_endpoint.url, bucket, dynamic, partition_by="day", mode="overwrite", partition_overwrite_mode="dynamic"
    )
    assert report.replaced == 1 and report.scope == (f"{PREFIX}day=2024-06-01/",)
    kept = [i for i in range(300) if i % 3 != 0]
    assert await visible_ids(s3_endpoint.url, url) == sorted(kept + list(range(1000, 1010)))
    assert plain_ids(s3_client, bucket, PREFIX) == sorted(kept + list(range(1000, 1010)))

    report = await write(s3_endpoint.url, bucket, rows(2000, 5), partition_by="day", mode="overwrite")
    assert report.replaced == 3 and report.scope == (PREFIX,)
    assert await visible_ids(s3_endpoint.url, url) == list(range(2000, 2005))
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(2000, 2005))

    report = await write(s3_endpoint.url, bucket, rows(0, 0), mode="overwrite")  # no rows: one empty file remains
    assert report.replaced == 3 and [rows for _, _, rows in report.files] == [0]
    assert await visible_ids(s3_endpoint.url, url) == []
    (only,) = data_keys(s3_client, bucket, PREFIX)
    assert pq.read_schema(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=only)["Body"].read())).names == [
        "id",
        "day",
        "text",
    ]
    assert uploads_left(s3_client, bucket) == []


async def test_a_failed_job_leaves_no_data_and_no_upload(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    spec = spec_for(bucket, partition_by=("day",))
    async with make_client(s3_endpoint.url) as client:
        done = await run_task(client, spec, rows(0, 200), 0)
        broken = TaskWriter(client, spec, 1)  # a task that died mid-write: its upload is left as it was
        await broken.write(rows(200, 200).to_batches()[0])
        await broken._finish(next(iter(broken._directories.values())))  # one file of it is up, not completed
        assert uploads_left(s3_client, bucket)
        aborted = await abort_write(client, spec, [done, None])
    assert len(aborted) >= 4
    assert uploads_left(s3_client, bucket) == [] and data_keys(s3_client, bucket, PREFIX) == []


async def test_retried_and_speculative_task_attempts_are_committed_once(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    spec = spec_for(bucket)
    table = rows(0, 400)
    async with make_client(s3_endpoint.url) as client:
        first = TaskWriter(client, spec, 0)  # attempt 0 of task 0: killed after uploading a file's parts
        await first.write(table.to_batches()[0])
        await first._finish(next(iter(first._directories.values())))
        retried = await run_task(client, spec, table, 0)  # attempt 1 of task 0: the committed one
        speculative = await run_task(client, spec, table, 0)  # a speculative duplicate that finished too
        assert len(uploads_left(s3_client, bucket)) == 3  # one key, three uploads
        report = await commit_write(client, spec, [retried])
    assert report.rows == 400 and speculative.files[0].upload_id != retried.files[0].upload_id
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(400))
    assert await visible_ids(s3_endpoint.url, f"s3://{bucket}/{PREFIX}") == list(range(400))
    assert uploads_left(s3_client, bucket) == []


async def test_a_stream_micro_batch_replayed_is_committed_once(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    query = "6d4bd51c-3d6c-4f4e-9a59-8c8b1f1a0001"
    spec = spec_for(bucket)
    async with make_client(s3_endpoint.url) as client:
        batch0 = WriteSpec(bucket, PREFIX, stream_job_id(query, 0), SCHEMA, spec.options)
        first = await run_task(client, batch0, rows(0, 100))
        assert (await commit_write(client, batch0, [first], query_id=query, batch=0)).status == "committed"
        replay = await run_task(client, batch0, rows(0, 100))  # the driver died before Spark recorded batch 0
        report = await commit_write(client, batch0, [replay], query_id=query, batch=0)
        assert report.status == "already_committed"
        assert await visible_ids(s3_endpoint.url, url) == list(range(100))
        assert uploads_left(s3_client, bucket) == []

        # batch 1: its first attempt's driver died after the claim; the replay rolls that claim back and commits
        batch1 = WriteSpec(bucket, PREFIX, stream_job_id(query, 1), SCHEMA, spec.options)
        dead = await run_task(client, batch1, rows(100, 50))
        await journal.create(
            client,
            journal.WriteEntry(
                job_id=batch1.job_id,
                state=journal.PENDING,
                bucket=bucket,
                prefix=PREFIX,
                files=dead.files,
                query_id=query,
                batch=1,
            ),
        )
        replay = await run_task(client, batch1, rows(100, 50))
        assert (await commit_write(client, batch1, [replay], query_id=query, batch=1)).status == "committed"
        assert await visible_ids(s3_endpoint.url, url) == list(range(150))
        assert uploads_left(s3_client, bucket) == []

        # long after: the entries are forgotten, the sink's record still knows batch 1
        await asyncio.sleep(1.2)  # the grace period, on the store's whole-second clock

        entry_time = (await client.head_object(bucket, layout.write_key(PREFIX, batch1.job_id))).last_modified

        async def store_now() -> float:  # the store's clock, a while after the last entry was written
            return entry_time + 3

        recovery = await recover_writes(client, bucket, PREFIX, store_now=store_now, grace_period=0.2, wait=True)
        assert sorted(recovery.forgotten) == sorted([batch0.job_id, batch1.job_id])
        assert control_keys(s3_client, bucket, PREFIX, "writes") == []
        late = await run_task(client, batch1, rows(100, 50))
        assert (await commit_write(client, batch1, [late], query_id=query, batch=1)).status == "already_committed"
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(150))
    assert uploads_left(s3_client, bucket) == []


async def test_concurrent_writers_never_lose_or_duplicate_a_row(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    appends = [write(s3_endpoint.url, bucket, rows(1000 * n, 200), partition_by="day") for n in range(3)]
    await asyncio.gather(*appends)
    assert await visible_ids(s3_endpoint.url, url) == sorted(
        i for n in range(3) for i in range(1000 * n, 1000 * n + 200)
    )

    overwrites = [write(s3_endpoint.url, bucket, rows(10_000 * n, 50), mode="overwrite") for n in (1, 2)]
    await asyncio.gather(*overwrites)
    winner = await visible_ids(s3_endpoint.url, url)
    assert winner in (list(range(10_000, 10_050)), list(range(20_000, 20_050)))
    assert plain_ids(s3_client, bucket, PREFIX) == winner
    assert uploads_left(s3_client, bucket) == []


async def test_compaction_merges_written_files_and_leaves_a_write_in_flight_alone(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/{PREFIX}"
    for n in range(6):
        await write(s3_endpoint.url, bucket, rows(100 * n, 100, days=1), partition_by="day")
    spec = spec_for(bucket, partition_by=("day",))
    async with make_client(s3_endpoint.url) as client:
        in_flight = await run_task(client, spec, rows(5000, 100, days=1))
        claim = await journal.create(
            client,
            journal.WriteEntry(
                job_id=spec.job_id, state=journal.PENDING, bucket=bucket, prefix=PREFIX, files=in_flight.files
            ),
        )
        await journal.advance(client, claim, state=journal.COMMITTED)  # its driver died right after the commit point
        await asyncio.sleep(1.2)
        options = CompactionOptions(grace_period=0.2, lease_ttl=5.0, clock_skew=0.0, min_input_files=3)
        report = await compact_prefix(client, url, options)
        assert report.status == "ok", report.to_text()
        assert report.recovery is not None and spec.job_id in report.recovery.writes.rolled_forward
        assert await visible_ids(s3_endpoint.url, url) == sorted([*range(600), *range(5000, 5100)])
        again = await recover_prefix(client, url, options)
        assert again.status == "ok", again.to_text()
    assert plain_ids(s3_client, bucket, PREFIX) == sorted([*range(600), *range(5000, 5100)])
    assert len(data_keys(s3_client, bucket, PREFIX)) <= 2
    assert uploads_left(s3_client, bucket) == []


async def test_bad_input_is_refused_naming_the_problem(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    floats = pa.table({"x": [1.5, 2.5], "v": [1, 2]})
    with pytest.raises(InvalidConfig, match=r"column 'x' is of type double.*cast of it to string"):
        await write(s3_endpoint.url, bucket, floats, partition_by="x")
    with pytest.raises(InvalidConfig, match="no column 'nope'"):
        await write(s3_endpoint.url, bucket, floats, partition_by="nope")
    with pytest.raises(InvalidConfig, match="every column"):
        await write(
            s3_endpoint.url, bucket, floats.select(["x"]).cast(pa.schema([("x", pa.string())])), partition_by="x"
        )
    with pytest.raises(
        InvalidConfig, match=r"targetFileSize \(maxFileSize\): must be between 5 MiB and 4 GiB \(S3's smallest"
    ):
        await write(s3_endpoint.url, bucket, floats, target_file_size=128)
    assert uploads_left(s3_client, bucket) == [] and data_keys(s3_client, bucket, PREFIX) == []
    with pytest.raises(InvalidConfig, match=r"unknown write option 'targetFileSise'.*did you mean targetFileSize"):
        await write(s3_endpoint.url, bucket, floats, targetFileSise="1MB")
    nanos = pa.table({"t": pa.array([1_000_000_001], pa.timestamp("ns"))})
    with pytest.raises(InvalidConfig, match="microseconds"):
        await write(s3_endpoint.url, bucket, nanos)
    with pytest.raises(SchemaMismatch, match="same columns"):
        await write_parquet_async(
            [pa.record_batch({"a": [1]}), pa.record_batch({"b": [1]})],
            f"s3://{bucket}/{PREFIX}",
            endpoint_url=s3_endpoint.url,
            policy=FAST_POLICY,
        )
