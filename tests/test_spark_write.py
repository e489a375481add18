"""``df.write.format("s3parquet")``, ``df.writeStream.format("s3parquet")`` and ``spark_ext.write`` on a real local
Spark against moto: every Spark type the source reads written and read back equal by Spark's own parquet reader, by
s3parquet and by pyarrow; the modes; a failed job; the helper's right-sized files; a stream sink across a driver
SIGKILL; and the s3parquet stream reading what the writer appends, once."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from support.spark_fixtures import download_prefix, spark_driver, spark_session  # noqa: F401  (`spark`)
from test_compact_support import make_client
from test_write_support import plain_ids, run_task, uploads_left

import spark_ext
from s3io.compaction import CompactionOptions, recover_prefix
from s3io.errors import InvalidConfig
from s3io.table import journal, layout
from s3io.table.write_protocol import complete_files
from s3io.write import WriteOptions, WriteSpec
from testbed.faultproxy import FaultRule, Latency

pytestmark = pytest.mark.timeout(600)

EVERY_TYPE = """
select id,
  cast(id as int) i, cast(id as smallint) sh, cast(id as tinyint) ti,
  cast(id as float) / 3 f, cast(id as double) / 7 d,
  cast(id * 1.5 as decimal(10, 2)) dec, cast(id * 100003 as decimal(30, 5)) bigdec,
  case when id % 6 = 0 then null else concat('s', id) end s, cast(concat('b', id) as binary) bin, id % 2 = 0 b,
  case when id % 5 = 0 then null else date_add(date'0001-01-01', cast(id * 20000 as int)) end dt,
  case when id % 4 = 0 then null
       else timestamp_seconds(-50000000000 + id * 1000003) + make_interval(0, 0, 0, 0, 0, 0, id / 1000) end ts,
  timestamp_ntz'1200-06-01 12:34:56.789012' + make_interval(0, 0, 0, cast(id as int), 0, 0, 0) tsn,
  array(id, null) arr, array(named_struct('x', id, 'y', concat('y', id))) arrs,
  map('k', id, 'n', cast(null as bigint)) m,
  named_struct('a', id, 'n', named_struct('b', cast(id as string), 'c', array(date'1500-03-01'))) st,
  cast(null as string) nothing, concat('day', id % 3) day
from range(60)
"""


def opts(endpoint: str, **extra: Any) -> dict[str, str]:
    return {"endpoint": endpoint, "gracePeriod": "0.2s", "clockSkew": "0s", **{k: str(v) for k, v in extra.items()}}


def save(df: Any, url: str, mode: str, options: dict[str, str]) -> None:
    writer = df.write.format("s3parquet").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(url)


def stream_ids(spark: Any, endpoint: str, url: str, schema: str, name: str, sink: Path, checkpoint: Path) -> list[int]:
    """One availableNow run of an s3parquet stream of ``url`` into a parquet sink; the ids the sink holds after it."""
    query = (
        spark.readStream.format("s3parquet")
        .schema(schema)
        .option("endpoint", endpoint)
        .option("streamName", name)
        .load(url)
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return sorted(r.id for r in spark.read.parquet(str(sink)).collect())


def test_every_type_written_reads_back_equal_in_spark_s3parquet_and_pyarrow(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    df = spark.sql(EVERY_TYPE).repartition(6, "day")  # 3 days over 6 tasks: at least 3 tasks write nothing
    url = f"s3://{bucket}/every/"
    save(df, url, "append", opts(s3_endpoint.url, partitionBy="day"))
    columns = [c for c in df.columns if c != "day"] + ["day"]  # partition columns come last when read
    expected = sorted(df.select(*columns).collect(), key=lambda r: r.id)

    local = download_prefix(s3_client, bucket, "every/", tmp_path / "copy")
    by_spark = spark.read.parquet(str(local))
    # the same types (a file read is all nullable in Spark, whoever wrote it)
    assert by_spark.schema.simpleString() == df.select(*columns).schema.simpleString()
    assert sorted(by_spark.collect(), key=lambda r: r.id) == expected

    by_source = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert sorted(by_source.select(*columns).collect(), key=lambda r: r.id) == expected

    arrow = df.select(*columns).toArrow().sort_by("id")
    by_pyarrow = ds.dataset(str(local), format="parquet", partitioning="hive").to_table().sort_by("id")
    assert by_pyarrow.column_names == arrow.column_names
    for name in columns:
        mine = by_pyarrow.column(name)
        if name == "day":
            mine = mine.cast("string")
        assert mine.to_pylist() == arrow.column(name).to_pylist(), name
    footer = pq.read_metadata(next(local.rglob("*.parquet"))).metadata
    assert footer[b"org.apache.spark.version"] == spark.version.encode()
    assert uploads_left(s3_client, bucket) == []


def test_modes_append_overwrite_and_dynamic_overwrite(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/modes/"
    rows = spark.sql("select id, concat('d', id % 2) day from range(10)")
    save(rows, url, "append", opts(s3_endpoint.url, partitionBy="day"))
    save(rows.selectExpr("id + 10 as id", "day"), url, "append", opts(s3_endpoint.url, partitionBy="day"))
    assert plain_ids(s3_client, bucket, "modes/") == list(range(20))
    one_day = spark.sql("select cast(100 as bigint) as id, 'd0' as day")
    dynamic = opts(s3_endpoint.url, partitionBy="day", partitionOverwriteMode="dynamic")
    save(one_day, url, "overwrite", dynamic)
    expected = sorted([100] + [i for i in range(20) if i % 2])
    assert plain_ids(s3_client, bucket, "modes/") == expected
    read = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert sorted(r.id for r in read.collect()) == expected
    save(one_day, url, "overwrite", opts(s3_endpoint.url, partitionBy="day"))
    assert plain_ids(s3_client, bucket, "modes/") == [100]


def test_partition_by_on_the_writer_fails_naming_the_option_that_works(
    spark: Any, s3_endpoint: Any, bucket: str
) -> None:
    df = spark.sql("select 1 as id, 'x' as day")
    with pytest.raises(InvalidConfig, match=r"\.option\('partitionBy', 'day,region'\)"):
        df.write.format("s3parquet").mode("append").partitionBy("day").option("endpoint", s3_endpoint.url).save(
            f"s3://{bucket}/p/"
        )
    misspelt = r"unknown s3parquet write option 'targetfilesise' \(did you mean targetFileSize"
    with pytest.raises(Exception, match=misspelt):
        save(df, f"s3://{bucket}/p/", "append", opts(s3_endpoint.url, targetFileSise="1MB"))


def test_a_failed_job_leaves_no_data_and_no_upload(spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    failing = spark.sql("select id, raise_error('task 3 fails') as x from range(400)").where("id < 300 or x is null")
    df = spark.sql("select id, repeat('x', 1000) as pad from range(400)").repartition(4)
    bad = df.join(failing, "id", "left")  # the failing expression runs in a task after others have written
    with pytest.raises(Exception, match="task 3 fails"):
        save(bad, f"s3://{bucket}/failed/", "append", opts(s3_endpoint.url))
    assert plain_ids(s3_client, bucket, "failed/") == []
    assert uploads_left(s3_client, bucket) == []


def test_the_helper_rebalances_into_one_file_per_directory_where_a_plain_write_makes_one_per_task(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    df = spark.sql("select id, concat('d', id % 3) day, repeat('v', 50) v from range(3000)").repartition(8)
    save(df, f"s3://{bucket}/plain/", "append", opts(s3_endpoint.url, partitionBy="day"))
    spark_ext.write(df, f"s3://{bucket}/helped/", partition_by=["day"], endpoint=s3_endpoint.url, gracePeriod="0s")
    plain = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, Prefix="plain/d")["Contents"]]
    helped = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, Prefix="helped/d")["Contents"]]
    assert len(plain) == 24 and len(helped) == 3
    assert plain_ids(s3_client, bucket, "helped/") == list(range(3000))


def test_auto_compact_merges_the_small_files_of_the_directories_written(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/auto/"
    for n in range(3):
        df = spark.sql(f"select id + {n * 100} as id, 'a' as day from range(100)").repartition(2)
        save(df, url, "append", opts(s3_endpoint.url, partitionBy="day", autoCompact="true", autoCompactMinFiles=5))
    files = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, Prefix="auto/day=a/")["Contents"]]
    assert len(files) == 1 and "/part-c-" in files[0]  # 6 small files, compacted at the third write
    assert plain_ids(s3_client, bucket, "auto/") == list(range(300))


SINK_DRIVER = """
import sys
from spark_ext.session import local_session

endpoint, source, url, checkpoint = sys.argv[1:5]
spark = local_session("local[2]")
query = (
    spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(source)
    .writeStream.format("s3parquet").option("endpoint", endpoint).option("gracePeriod", "0.2s")
    .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds").start(url)
)
query.awaitTermination(600)
"""


def test_a_stream_sink_killed_after_a_commit_and_restarted_writes_every_row_once(
    spark: Any, fault_proxy: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The driver (its JVM and workers) is SIGKILLed once micro-batch 1 is published, before Spark records its
    commit: the restarted query replays batch 1, which the sink recognises as committed."""
    source = tmp_path / "source"
    source.mkdir()
    for n in range(4):
        spark.range(n * 10, n * 10 + 10).coalesce(1).write.mode("append").parquet(str(source))
    url, checkpoint = f"s3://{bucket}/sink/", tmp_path / "checkpoint"
    # the second raise of the sink's record (batch 1's, right after its publish) hangs: the driver dies there
    fault_proxy.add_rule(FaultRule(fault=Latency(120), method="PUT", path=r"/sink/_s3io_table/sinks/", nth=2))
    (tmp_path / "driver.py").write_text(SINK_DRIVER)
    with spark_driver(tmp_path / "driver.py", fault_proxy.url, str(source), url, str(checkpoint)):
        fault_proxy.wait_for_requests(2, timeout=240, method="PUT", path=r"/sink/_s3io_table/sinks/")
    assert plain_ids(s3_client, bucket, "sink/") == list(range(20))  # batches 0 and 1 are published

    query = (
        spark.readStream.schema("id long")
        .parquet(str(source))
        .writeStream.format("s3parquet")
        .option("endpoint", s3_endpoint.url)
        .option("gracePeriod", "0.2s")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(url)
    )
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert plain_ids(s3_client, bucket, "sink/") == list(range(40))
    assert uploads_left(s3_client, bucket) == []


def test_the_s3parquet_stream_reads_what_the_writer_appends_exactly_once(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    url, sink, checkpoint = f"s3://{bucket}/appended/", tmp_path / "sink", tmp_path / "checkpoint"

    def stream_once() -> list[int]:
        return stream_ids(spark, s3_endpoint.url, url, "id long, day string", "reader", sink, checkpoint)

    for n in range(2):
        batch = spark.sql(f"select id + {n * 50} as id, concat('d', id % 2) day from range(50)")
        save(batch, url, "append", opts(s3_endpoint.url, partitionBy="day"))
    assert stream_once() == list(range(100))
    save(
        spark.sql("select id + 100 as id, 'd9' as day from range(5)"),
        url,
        "append",
        opts(s3_endpoint.url, partitionBy="day"),
    )
    assert stream_once() == list(range(105))


async def test_spark_readers_do_not_see_a_write_committed_but_not_yet_published(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """A write whose uploads are complete but whose entry still says "committed" (its driver died there): plain
    readers see its file already, the s3parquet batch source and stream do not; once recovery publishes it, both
    read it, the stream once."""
    url = f"s3://{bucket}/midway/"
    save(spark.sql("select id from range(10)"), url, "append", opts(s3_endpoint.url))
    new = pa.table({"id": pa.array(range(100, 105), pa.int64())})
    spec = WriteSpec(bucket, "midway/", layout.new_job_id(), new.schema, WriteOptions(grace_period=0.2))
    async with make_client(s3_endpoint.url) as client:
        output = await run_task(client, spec, new)
        claim = await journal.create(
            client,
            journal.WriteEntry(
                job_id=spec.job_id, state=journal.PENDING, bucket=bucket, prefix="midway/", files=output.files
            ),
        )
        committed = await journal.advance(client, claim, state=journal.COMMITTED)
        await complete_files(client, committed)
    assert plain_ids(s3_client, bucket, "midway/") == [*range(10), *range(100, 105)]

    def source_ids() -> list[int]:
        read = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
        return sorted(r.id for r in read.collect())

    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def midway_stream_ids() -> list[int]:
        return stream_ids(spark, s3_endpoint.url, url, "id long", "midway", sink, checkpoint)

    assert source_ids() == list(range(10))
    assert midway_stream_ids() == list(range(10))
    async with make_client(s3_endpoint.url) as client:
        report = await recover_prefix(client, url, CompactionOptions(grace_period=0.2, clock_skew=0.0))
    assert spec.job_id in report.recovery.writes.rolled_forward
    assert source_ids() == [*range(10), *range(100, 105)]
    assert midway_stream_ids() == [*range(10), *range(100, 105)]
