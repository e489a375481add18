"""Every Spark idiom of writing to s3parquet works, each in the shared real Spark session against moto (issue 38):
``writeStream`` with ``.option("checkpointLocation", ...)`` and ``.start(path)``, with the session's
``spark.sql.streaming.checkpointLocation`` and ``.option("path", ...)``, ``trigger(availableNow=True)`` and
``processingTime``, a restart on the same checkpoint committing every micro-batch once; ``.save(path)`` and
``.option("path", ...).save()``; a write given ``leaseTtl`` (a stream's option too: it was taken for a readStream);
``foreachBatch`` calling ``spark_ext.write``. The data source parses nothing until Spark says what it is for."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from support.spark_fixtures import spark_session  # noqa: F401  (`spark`)
from test_write_support import plain_ids, uploads_left

import s3io
import spark_ext
from s3io.errors import SchemaMismatch
from spark_ext.datasource import S3ParquetDataSource

pytestmark = pytest.mark.timeout(600)


def _source_dir(spark: Any, root: Path, batches: range) -> Path:
    """A local parquet directory a file stream reads, one file per batch of ten ids."""
    root.mkdir(exist_ok=True)
    for n in batches:
        spark.range(n * 10, n * 10 + 10).coalesce(1).write.mode("append").parquet(str(root))
    return root


def _finish(query: Any) -> None:
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def test_the_data_source_parses_and_lists_nothing_until_spark_names_its_role() -> None:
    """Built with a write's options, a stream's, or nonsense, the source does nothing: no parse, no listing (a
    nonexistent endpoint would fail a listing)."""
    for options in (
        {"path": "s3://b/t/", "checkpointlocation": "/tmp/ck", "leasettl": "30s", "partitionby": "day"},
        {"path": "s3://b/t/", "streamname": "s", "endpoint": "http://127.0.0.1:9"},
        {"nonsense": "1"},
    ):
        assert S3ParquetDataSource(options).options == options


def test_write_stream_with_a_checkpoint_option_and_start_path_commits_each_batch_once_across_a_restart(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The issue's idiom (it failed with "unknown option 'checkpointlocation'"): two availableNow runs on one
    checkpoint, new files between them; every row once, no upload left."""
    source, url, checkpoint = tmp_path / "source", f"s3://{bucket}/sink/", tmp_path / "checkpoint"

    def run() -> None:
        stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(source))
        writer = stream.writeStream.format("s3parquet").option("endpoint", s3_endpoint.url)
        writer = writer.option("gracePeriod", "0.2s").option("checkpointLocation", str(checkpoint))
        _finish(writer.trigger(availableNow=True).start(url))

    _source_dir(spark, source, range(2))
    run()
    assert plain_ids(s3_client, bucket, "sink/") == list(range(20))
    _source_dir(spark, source, range(2, 3))
    run()  # the restart: batches 0 and 1 are not written again, batch 2 is
    assert plain_ids(s3_client, bucket, "sink/") == list(range(30))
    assert uploads_left(s3_client, bucket) == []


def test_write_stream_with_the_sessions_checkpoint_location_option_path_and_processing_time(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """``spark.sql.streaming.checkpointLocation`` with a query name, the path as an option, a processingTime
    trigger; restarted under the same name, it resumes from its checkpoint."""
    source, url = tmp_path / "source", f"s3://{bucket}/timed/"
    conf = "spark.sql.streaming.checkpointLocation"
    saved = spark.conf.get(conf, None)
    spark.conf.set(conf, str(tmp_path / "checkpoints"))
    try:
        for batches, expected in ((range(2), 20), (range(2, 4), 40)):
            _source_dir(spark, source, batches)
            query = (
                spark.readStream.schema("id long")
                .parquet(str(source))
                .writeStream.format("s3parquet")
                .queryName("timed_sink")
                .option("endpoint", s3_endpoint.url)
                .option("gracePeriod", "0.2s")
                .option("path", url)
                .trigger(processingTime="200 milliseconds")
                .start()
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
            assert query.exception() is None, query.exception()
            assert plain_ids(s3_client, bucket, "timed/") == list(range(expected))
    finally:
        spark.conf.set(conf, saved) if saved is not None else spark.conf.unset(conf)
    assert (tmp_path / "checkpoints" / "timed_sink" / "commits").is_dir()


def test_save_with_a_path_argument_or_option_and_a_lease_ttl(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """``.save(path)``, ``.option("path", ...).save()``, and ``leaseTtl`` on an append and an overwrite (it was
    parsed as a readStream's option: "streamName: required")."""
    url = f"s3://{bucket}/saved/"
    writer = spark.range(0, 5).write.format("s3parquet").option("endpoint", s3_endpoint.url)
    writer.mode("append").option("gracePeriod", "0.2s").save(url)
    writer = spark.range(5, 10).write.format("s3parquet").option("endpoint", s3_endpoint.url)
    writer.mode("append").option("path", url).option("leaseTtl", "30s").option("gracePeriod", "0.2s").save()
    assert plain_ids(s3_client, bucket, "saved/") == list(range(10))
    writer = spark.range(100, 103).write.format("s3parquet").option("endpoint", s3_endpoint.url)
    writer.mode("overwrite").option("leaseTtl", "30s").option("gracePeriod", "0.2s").save(url)
    assert plain_ids(s3_client, bucket, "saved/") == [100, 101, 102]


def test_for_each_batch_calling_spark_ext_write(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    source, url = _source_dir(spark, tmp_path / "source", range(3)), f"s3://{bucket}/each/"

    def write_batch(df: Any, batch_id: int) -> None:
        days = df.selectExpr("id", "concat('d', id % 2) as day")
        spark_ext.write(days, url, partition_by="day", endpoint=s3_endpoint.url, gracePeriod="0.2s")

    query = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    _finish(query)
    assert plain_ids(s3_client, bucket, "each/") == list(range(30))
    read = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert sorted((r.id, r.day) for r in read.collect()) == [(i, f"d{i % 2}") for i in range(30)]


def test_a_spark_append_that_does_not_fit_the_table_is_refused_before_any_task_and_a_stream_before_any_batch(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The issue's broken table: an unpartitioned append into a partitioned table committed, and every later read
    failed. Now the driver checks the table's shape first (s3io.write.check_append): the batch write and the stream
    sink are refused naming both, nothing is uploaded, the table reads as before; mergeSchema admits a new column."""
    url = f"s3://{bucket}/shaped/"
    day = spark.range(0, 20).selectExpr("id", "cast(id % 2 as string) as day")
    day.write.format("s3parquet").mode("append").option("endpoint", s3_endpoint.url).option("partitionBy", "day").save(
        url
    )
    before = plain_ids(s3_client, bucket, "shaped/")

    flat = spark.range(100, 110).write.format("s3parquet").mode("append").option("endpoint", s3_endpoint.url)
    with pytest.raises(Exception) as refused:
        flat.save(url)
    first = str(refused.value).splitlines()[0]
    assert "SchemaMismatch" in first and "partitioned by day" in first, str(refused.value)[:2000]

    wider = spark.range(200, 210).selectExpr("id", "'0' as day", "nullif(id, -1) * 2 as extra")
    wide = wider.write.format("s3parquet").mode("append").option("endpoint", s3_endpoint.url)
    with pytest.raises(Exception) as refused_wide:
        wide.option("partitionBy", "day").save(url)
    assert "extra" in str(refused_wide.value) and "mergeSchema" in str(refused_wide.value)

    source = _source_dir(spark, tmp_path / "flat", range(1))
    sink = spark.readStream.schema("id long").parquet(str(source)).writeStream.format("s3parquet")
    sink = sink.option("endpoint", s3_endpoint.url).option("checkpointLocation", str(tmp_path / "ck"))
    query = sink.trigger(availableNow=True).start(url)
    with pytest.raises(StreamingQueryException) as refused_stream:
        query.awaitTermination(300)
    first_stream = str(refused_stream.value).splitlines()[0]
    assert "s3io.errors.SchemaMismatch" in first_stream and "partitioned by day" in first_stream, first_stream
    assert plain_ids(s3_client, bucket, "shaped/") == before and uploads_left(s3_client, bucket) == []

    wide.option("partitionBy", "day").option("mergeSchema", "true").save(url)
    back = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).option("mergeSchema", "true").load(url)
    assert back.count() == 30 and "extra" in back.columns  # read as Spark's parquet reader merges: mergeSchema


def test_random_spark_and_python_writes_leave_a_table_spark_and_s3io_read_after_each(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Issue 38's done-means across entry points: a seeded sequence of appends, overwrites and refused writes, each
    through Spark's df.write or s3io.write_parquet, of three schemas, partitioned or not; after each, Spark's
    s3parquet reader and s3io read exactly the rows of the writes that were taken, and no upload is left."""
    url, options = f"s3://{bucket}/mixed/", {"endpoint": s3_endpoint.url, "gracePeriod": "0s", "clockSkew": "0s"}
    columns = {"long": "id", "text": "cast(id as string) as id", "wider": "id, 'n' as note"}
    rng = random.Random(3838)
    expected: list[str] = []
    current: tuple[str, bool] | None = None
    start = 0
    for _ in range(8):
        shape, by_day, mode = (
            rng.choice(list(columns)),
            rng.random() < 0.5,
            rng.choice(["append", "append", "overwrite"]),
        )
        through_spark = rng.random() < 0.5
        frame = spark.range(start, start + 3).selectExpr(*columns[shape].split(", "), "cast(id % 2 as string) as day")
        start += 3
        fits = mode == "overwrite" or current in (None, (shape, by_day))
        try:
            if through_spark:
                writer = frame.write.format("s3parquet").mode(mode).options(**options)
                writer.option("partitionBy", "day" if by_day else "").save(url)
            else:
                s3io.write_parquet(
                    pa.Table.from_pandas(frame.toPandas(), preserve_index=False),
                    url,
                    endpoint_url=s3_endpoint.url,
                    mode=mode,
                    partition_by=["day"] if by_day else [],
                    grace_period=0,
                    clock_skew=0,
                )
        except Exception as exc:  # Spark wraps it; s3io raises it as it is
            refused = isinstance(exc, SchemaMismatch) or "SchemaMismatch" in str(exc).splitlines()[0]
            assert not fits and refused, (shape, by_day, mode, current, str(exc))
        else:
            assert fits, (shape, by_day, mode, current)
            written = [str(i) for i in range(start - 3, start)]
            expected = written + (expected if mode == "append" else [])
            current = (shape, by_day)
        assert uploads_left(s3_client, bucket) == []
        read = spark.read.format("s3parquet").options(endpoint=s3_endpoint.url).load(url)
        assert sorted(str(r.id) for r in read.select("id").collect()) == sorted(expected)
        back = s3io.read_parquet(url, endpoint_url=s3_endpoint.url, columns=["id"])
        assert sorted(str(i) for i in back.column("id").to_pylist()) == sorted(expected)
