"""The s3parquet source driven in-process (no Spark session): planning, packing, pushdown, reading, errors.

Spark calls these same methods in its Python workers (``DataSource(options)``, ``schema()``, ``reader(schema)``,
``pushFilters``, ``partitions()``, ``read(partition)``); calling them directly makes the plan and each task's
metrics observable.
"""

from __future__ import annotations

import logging
import pickle
import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from support.spark_fixtures import column_checksums, parquet_bytes, put_parquet

from s3io.errors import CorruptFile, InvalidConfig, NotFound, ObjectChanged, SchemaMismatch, Throttled
from s3io.s3.types import ObjectInfo
from spark_ext.datasource import S3ParquetDataSource, bound_to_session
from spark_ext.planning.binpack import plan_partitions
from spark_ext.planning.spark_arrow_types import UnsupportedType, conform_to_spark, spark_arrow_schema, spark_schema
from spark_ext.source.batch_read import default_parallelism
from spark_ext.source.batch_reader import S3ParquetPushdownReader, S3ParquetReader
from spark_ext.source.driver_side import NoDataFiles, PathNotFound
from spark_ext.source.partition import S3ParquetPartition
from spark_ext.spark_settings import TIME_ZONE, SessionDefaults
from testbed.faultproxy import ErrorResponse, FaultRule
from testbed.scripted_s3 import Reply, Request, ScriptedS3, list_body

pytestmark = pytest.mark.timeout(120)


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i}" if i % 7 else None for i in ids], pa.string()),
            "score": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


PUSHDOWN_SOURCE = bound_to_session(SessionDefaults(), filter_pushdown=True)


def _source(endpoint: str, path: str, *, pushdown: bool = False, **options: str) -> S3ParquetDataSource:
    """The source as Spark builds it in a Python worker (options arrive with lower-cased keys)."""
    source_class = PUSHDOWN_SOURCE if pushdown else S3ParquetDataSource
    return source_class({"path": path, "endpoint": endpoint, **{k.lower(): v for k, v in options.items()}})


def _read_all(reader: S3ParquetReader, partitions: list) -> pa.Table:
    batches = [batch for partition in partitions for batch in reader.read(partition)]
    return pa.Table.from_batches(batches) if batches else None


def _objects(s3_client, bucket: str, prefix: str) -> list[ObjectInfo]:
    items = s3_client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return [ObjectInfo(bucket, item["Key"], item["Size"], item["ETag"].strip('"')) for item in items]


# ------------------------------------------------------------------------------------------------ options


def test_unknown_option_names_it_and_suggests_the_close_one_or_lists_the_known_ones():
    with pytest.raises(InvalidConfig) as caught:
        S3ParquetDataSource({"path": "s3://bucket/t/", "maxpartitonbytes": "1m"}).schema()
    message = str(caught.value)
    assert "maxpartitonbytes" in message and "did you mean maxPartitionBytes" in message
    with pytest.raises(InvalidConfig) as caught:
        S3ParquetDataSource({"path": "s3://bucket/t/", "quux": "1"}).schema()
    message = str(caught.value)
    assert "openCostInBytes" in message and "stallTimeout" in message


def test_malformed_option_value_names_the_option():
    with pytest.raises(InvalidConfig, match="maxPartitionBytes"):
        S3ParquetDataSource({"path": "s3://bucket/t/", "maxpartitionbytes": "lots"}).schema()


def test_secrets_are_redacted_from_reprs_but_reach_the_tasks(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    source = _source(
        s3_endpoint.url, f"s3://{bucket}/t/", accessKeyId="testing", secretAccessKey="testing", sessionToken="tok-42"
    )
    shown = repr(source)
    assert "tok-42" not in shown and "***" in shown
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    assert "tok-42" not in repr(partition) and "tok-42" not in repr(partition.spec)
    shipped = pickle.loads(cloudpickle.dumps(partition))
    assert shipped.spec.options.store.session_token == "tok-42"
    assert _read_all(reader, [shipped]).num_rows == 10


def test_missing_path_is_an_error_naming_it(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    with pytest.raises(PathNotFound, match=f"s3://{bucket}/nothing-here/"):
        _source(s3_endpoint.url, f"s3://{bucket}/nothing-here/").schema()


def test_directory_without_data_files_needs_a_schema(s3_endpoint, bucket, s3_client):
    s3_client.put_object(Bucket=bucket, Key="t/_SUCCESS", Body=b"")
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    with pytest.raises(NoDataFiles, match="Unable to infer schema"):
        source.schema()
    schema = StructType([StructField("id", LongType())])
    reader = source.reader(schema)
    assert reader.partitions() == []
    assert list(reader.read(S3ParquetPartition(0, (), None))) == []


# ------------------------------------------------------------------------------------------------ schema


def test_schema_maps_arrow_types_as_sparks_parquet_reader_does():
    arrow = pa.schema(
        [
            ("u8", pa.uint8()),
            ("u64", pa.uint64()),
            ("ts", pa.timestamp("ns", tz="UTC")),
            ("naive", pa.timestamp("ms")),
            ("dict", pa.dictionary(pa.int32(), pa.large_string())),
            ("dec", pa.decimal128(12, 3)),
            ("tags", pa.large_list(pa.string())),
        ]
    )
    schema = spark_schema(arrow)
    assert [f.dataType for f in schema.fields] == [
        ShortType(),
        DecimalType(20, 0),
        TimestampType(),
        TimestampNTZType(),
        StringType(),
        DecimalType(12, 3),
        ArrayType(StringType(), True),
    ]
    assert all(f.nullable for f in schema.fields)
    with pytest.raises(UnsupportedType, match=r"'t'.*columns option"):
        spark_schema(pa.schema([("t", pa.time64("us"))]))


def test_batches_are_cast_to_exactly_the_arrow_schema_spark_checks():
    target = spark_arrow_schema(StructType([StructField("ts", TimestampType()), StructField("s", StringType())]))
    batch = pa.record_batch(
        [pa.array([1_000_000_123], pa.timestamp("ns", tz="UTC")), pa.array(["x"], pa.large_string())],
        names=["ts", "s"],
    )
    out = conform_to_spark(batch, target)
    assert out.schema.equals(target)
    assert out.column(0).to_pylist() == [datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]


def test_columns_option_reads_only_those_columns_in_that_order(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/k=1/a.parquet", _table(0, 10))
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", columns="score,K")
    schema = source.schema()
    assert schema.fieldNames() == ["score", "k"]
    table = _read_all(source.reader(schema), source.reader(schema).partitions())
    assert table.column_names == ["score", "k"] and table.column("k").to_pylist() == [1] * 10
    with pytest.raises(InvalidConfig, match=r"'nope'.*id, name, score, k"):
        _source(s3_endpoint.url, f"s3://{bucket}/t/", columns="id,nope").schema()


def test_user_schema_columns_match_file_columns_ignoring_case_when_footers_were_read(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    source.schema()
    schema = StructType([StructField("ID", LongType()), StructField("missing", StringType())])
    reader = source.reader(schema)
    table = _read_all(reader, reader.partitions())
    assert table.column_names == ["ID", "missing"]
    assert table.column("ID").to_pylist() == list(range(10)) and table.column("missing").null_count == 10


# ------------------------------------------------------------------------------------------------ packing


def test_small_files_are_packed_as_spark_packs_them(s3_endpoint, bucket, s3_client):
    for i in range(40):
        put_parquet(s3_client, bucket, f"t/part-{i:03d}.parquet", _table(i * 50, 50 + i))
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", openCostInBytes="2000", minPartitionNum="3")
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    expected = plan_partitions(_objects(s3_client, bucket, "t/"), open_cost=2000, min_partitions=3)
    assert [[p.obj.key for p in part.pieces] for part in partitions] == [[s.key for s in g] for g in expected]
    assert 1 < len(partitions) < 40
    assert _read_all(reader, partitions).num_rows == sum(50 + i for i in range(40))


def test_default_parallelism_comes_from_the_registered_session():
    source_class = bound_to_session(SessionDefaults(default_parallelism=7, settings=((TIME_ZONE, "Europe/Paris"),)))
    shipped = pickle.loads(cloudpickle.dumps(source_class))  # as spark.dataSource.register ships it
    assert issubclass(shipped, S3ParquetDataSource) and shipped.name() == "s3parquet"
    assert default_parallelism(shipped.session_defaults) == 7
    assert shipped.session_defaults.time_zone == "Europe/Paris"
    assert bound_to_session(SessionDefaults(), filter_pushdown=False).filter_pushdown is False


def test_large_files_are_split_at_row_groups_and_every_row_group_is_read_once(s3_endpoint, bucket, s3_client):
    sizes = {}
    for i in range(3):
        sizes[f"t/big-{i}.parquet"] = put_parquet(
            s3_client, bucket, f"t/big-{i}.parquet", _table(i * 20_000, 20_000), row_group_size=2_000
        )
    for i in range(5):
        put_parquet(s3_client, bucket, f"t/small-{i}.parquet", _table(100_000 + i * 10, 10))
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", maxPartitionBytes="64KiB", openCostInBytes="4KiB")
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    row_groups = {}
    for key in sizes:
        body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
        md = pq.ParquetFile(pa.BufferReader(body)).metadata
        row_groups[key] = [
            sum(md.row_group(rg).column(c).total_compressed_size for c in range(md.num_columns))
            for rg in range(md.num_row_groups)
        ]
    expected = plan_partitions(
        _objects(s3_client, bucket, "t/"),
        max_partition_bytes=64 * 1024,
        open_cost=4 * 1024,
        min_partitions=default_parallelism(source.session_defaults),
        row_group_sizes=row_groups,
    )
    assert [[(p.obj.key, p.row_groups) for p in part.pieces] for part in partitions] == [
        [(s.key, s.row_groups) for s in g] for g in expected
    ]
    assert reader.last_plan["split_files"] == 3
    for key in sizes:
        groups = [rg for part in partitions for p in part.pieces if p.obj.key == key for rg in p.row_groups]
        assert sorted(groups) == list(range(10))
    table = _read_all(reader, partitions)
    assert sorted(table.column("id").to_pylist()) == [*range(60_000), *range(100_000, 100_050)]


# ------------------------------------------------------------------------------------------------ pushdown


def _hive(s3_client, bucket: str) -> None:
    for year in (2023, 2024):
        for month in (1, 2, 3):
            start = (year * 100 + month) * 1000
            put_parquet(s3_client, bucket, f"t/year={year}/month={month}/a.parquet", _table(start, 500))


def test_partition_filters_prune_files_exactly_and_are_not_returned(s3_endpoint, bucket, s3_client):
    _hive(s3_client, bucket)
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", pushdown=True)
    schema = source.schema()
    assert schema.fieldNames()[-2:] == ["year", "month"] and schema["year"].dataType == IntegerType()
    reader = source.reader(schema)
    kept_by_us = [EqualTo(("year",), 2024), In(("month",), [1, 3])]
    for_spark = GreaterThan(("id",), 5)
    assert list(reader.pushFilters([*kept_by_us, for_spark])) == [for_spark]
    partitions = reader.partitions()
    keys = sorted(p.obj.key for part in partitions for p in part.pieces)
    assert keys == ["t/year=2024/month=1/a.parquet", "t/year=2024/month=3/a.parquet"]
    table = _read_all(reader, partitions)
    assert set(zip(table.column("year").to_pylist(), table.column("month").to_pylist(), strict=True)) == {
        (2024, 1),
        (2024, 3),
    }


def test_data_filters_prune_row_groups_and_bytes_but_go_back_to_spark(s3_endpoint, bucket, s3_client, caplog):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 50_000), row_group_size=5_000)
    source = _source(
        s3_endpoint.url, f"s3://{bucket}/t/", pushdown=True, wholeObjectThreshold="0", openCostInBytes="4MiB"
    )  # one partition: the file is not split by row groups here
    schema = source.schema()

    def read(filters):
        reader = source.reader(schema)
        returned = list(reader.pushFilters(filters))
        partitions = reader.partitions()
        with caplog.at_level(logging.INFO, logger="spark_ext"):
            caplog.clear()
            table = _read_all(reader, partitions)
        (line,) = [r.getMessage() for r in caplog.records if "s3parquet task done" in r.getMessage()]
        return returned, table, line

    filters = [GreaterThanOrEqual(("id",), 12_000), LessThan(("id",), 18_000)]
    returned, pruned, line = read(filters)
    assert returned == filters  # statistics pruning is not exact: Spark must still filter the rows
    _, full, full_line = read([])
    assert "row_groups=2 (pruned 8)" in line and "row_groups=10 (pruned 0)" in full_line
    bytes_in = int(line.split(" bytes_in=")[1].split()[0])
    full_bytes_in = int(full_line.split(" bytes_in=")[1].split()[0])
    assert bytes_in < full_bytes_in / 3
    ids = pruned.column("id")
    expected = full.filter(pc.and_(pc.greater_equal(full["id"], 12_000), pc.less(full["id"], 18_000)))
    assert pruned.filter(pc.and_(pc.greater_equal(ids, 12_000), pc.less(ids, 18_000))).equals(expected)


def test_pushdown_is_opt_in_and_the_default_reader_does_not_implement_push_filters(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    default = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    assert type(default.reader(default.schema())) is S3ParquetReader
    assert S3ParquetReader.pushFilters is DataSourceReader.pushFilters  # so PySpark never calls it
    pushing = _source(s3_endpoint.url, f"s3://{bucket}/t/", pushdown=True)
    assert isinstance(pushing.reader(pushing.schema()), S3ParquetPushdownReader)


# ------------------------------------------------------------------------------------------------ reading


def test_user_schema_reads_fewer_columns_and_fewer_bytes(s3_endpoint, bucket, s3_client, caplog):
    wide = _table(0, 20_000).append_column("blob", pa.array([f"{i:0>200}" for i in range(20_000)]))
    put_parquet(s3_client, bucket, "t/a.parquet", wide, compression="none")
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", wholeObjectThreshold="0")

    def bytes_in(schema):
        reader = source.reader(schema)
        partitions = reader.partitions()
        with caplog.at_level(logging.INFO, logger="spark_ext"):
            caplog.clear()
            table = _read_all(reader, partitions)
        (line,) = [r.getMessage() for r in caplog.records if "s3parquet task done" in r.getMessage()]
        return table, int(line.split(" bytes_in=")[1].split()[0])

    narrow, narrow_bytes = bytes_in(StructType([StructField("id", LongType())]))
    full, full_bytes = bytes_in(source.schema())
    assert narrow.column_names == ["id"] and narrow.column("id").equals(full.column("id"))
    assert narrow_bytes * 10 < full_bytes


def test_rows_types_and_values_match_pyarrow(s3_endpoint, bucket, s3_client):
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "day": pa.array([date(2024, 1, 1), None, date(2024, 3, 1)]),
            "at": pa.array([datetime(2024, 1, 1, tzinfo=UTC), None, datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)]),
            "amount": pa.array([Decimal("1.25"), Decimal("-3.50"), None], pa.decimal128(10, 2)),
            "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
            "small": pa.array([1, 2, 255], pa.uint8()),
        }
    )
    put_parquet(s3_client, bucket, "t/a.parquet", table)
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    schema = source.schema()
    reader = source.reader(schema)
    got = _read_all(reader, reader.partitions())
    assert got.schema.equals(spark_arrow_schema(schema))
    assert column_checksums(got) == column_checksums(table.cast(got.schema))


def test_task_metrics_are_logged_once_per_task(s3_endpoint, bucket, s3_client, caplog):
    for i in range(4):
        put_parquet(s3_client, bucket, f"t/{i}.parquet", _table(i * 10, 10))
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", minPartitionNum="2")
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    with caplog.at_level(logging.INFO, logger="spark_ext"):
        _read_all(reader, partitions)
    lines = [r.getMessage() for r in caplog.records if "s3parquet task done" in r.getMessage()]
    assert len(lines) == len(partitions) == 2
    for line in lines:
        for word in ("files=2", "bytes_in=", "requests=2", "retries=0", "timeouts=0"):
            assert word in line


def test_a_consumer_that_stops_early_cancels_the_task(s3_endpoint, bucket, s3_client, caplog):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 50_000), row_group_size=1_000)
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", openCostInBytes="4MiB")  # one partition, not split
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    batches = reader.read(partition)
    with caplog.at_level(logging.INFO, logger="spark_ext"):
        assert next(batches).num_rows > 0
        batches.close()  # what happens when Spark stops consuming (a LIMIT): no thread, no loop left behind
    import threading

    assert not [t for t in threading.enumerate() if t.name.startswith("s3parquet-partition")]
    lines = [r.getMessage() for r in caplog.records if r.name == "spark_ext.source"]
    assert len([line for line in lines if line.startswith("s3parquet task stopped early")]) == 1, lines
    assert not [line for line in lines if "task failed" in line or "task done" in line]


# ------------------------------------------------------------------------------------------------ bad files


def test_corrupt_file_fails_with_its_url_unless_ignored(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    s3_client.put_object(Bucket=bucket, Key="t/b.parquet", Body=b"PAR1 this is not parquet at all PAR1")
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    reader = source.reader(source.schema())
    with pytest.raises(CorruptFile, match=f"s3://{bucket}/t/b.parquet"):
        _read_all(reader, reader.partitions())
    tolerant = _source(s3_endpoint.url, f"s3://{bucket}/t/", ignoreCorruptFiles="true")
    reader = tolerant.reader(tolerant.schema())
    assert _read_all(reader, reader.partitions()).num_rows == 10


def test_schema_inference_skips_a_corrupt_first_file_only_when_told_to(s3_endpoint, bucket, s3_client):
    s3_client.put_object(Bucket=bucket, Key="t/a.parquet", Body=b"garbage" * 10)
    put_parquet(s3_client, bucket, "t/b.parquet", _table(0, 10))
    with pytest.raises(CorruptFile, match=f"s3://{bucket}/t/a.parquet"):
        _source(s3_endpoint.url, f"s3://{bucket}/t/").schema()
    schema = _source(s3_endpoint.url, f"s3://{bucket}/t/", ignoreCorruptFiles="true").schema()
    assert schema.fieldNames() == ["id", "name", "score"]


def test_file_deleted_after_planning_fails_unless_ignore_missing_files(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    put_parquet(s3_client, bucket, "t/b.parquet", _table(10, 10))
    strict = _source(s3_endpoint.url, f"s3://{bucket}/t/")
    tolerant = _source(s3_endpoint.url, f"s3://{bucket}/t/", ignoreMissingFiles="true")
    strict_reader, tolerant_reader = strict.reader(strict.schema()), tolerant.reader(tolerant.schema())
    strict_parts, tolerant_parts = strict_reader.partitions(), tolerant_reader.partitions()
    s3_client.delete_object(Bucket=bucket, Key="t/b.parquet")
    with pytest.raises(NotFound, match=f"s3://{bucket}/t/b.parquet"):
        _read_all(strict_reader, strict_parts)
    assert _read_all(tolerant_reader, tolerant_parts).column("id").to_pylist() == list(range(10))


def test_a_file_that_keeps_failing_fails_the_task_naming_the_file_and_the_cause(bucket, s3_client, fault_proxy):
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    put_parquet(s3_client, bucket, "t/b.parquet", _table(10, 10))
    source = _source(fault_proxy.url, f"s3://{bucket}/t/", maxAttempts="3", backoffBase="10ms", backoffCap="50ms")
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", path=r"/t/b\.parquet"))
    with pytest.raises(Throttled) as caught:
        _read_all(reader, partitions)
    message = str(caught.value)
    assert f"s3://{bucket}/t/b.parquet" in message and "attempts=3" in message and "SlowDown" in message


def test_the_policy_of_a_read_comes_from_s3io_variables_where_no_option_sets_it(
    bucket, s3_client, fault_proxy, monkeypatch
):
    """S3IO_* variables of the driver reach every task (the policy travels with the partitions)."""
    put_parquet(s3_client, bucket, "t/a.parquet", _table(0, 10))
    monkeypatch.setenv("S3IO_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("S3IO_BACKOFF_BASE", "10ms")
    monkeypatch.setenv("S3IO_BACKOFF_CAP", "50ms")
    source = _source(fault_proxy.url, f"s3://{bucket}/t/")
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", path=r"/t/a\.parquet"))
    with pytest.raises(Throttled, match="attempts=2"):
        _read_all(reader, partitions)


def test_merge_schema_unions_columns_across_files_and_merges_types_as_spark_does(s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "t/a.parquet", pa.table({"id": pa.array([1], pa.int64()), "a": ["x"]}))
    put_parquet(s3_client, bucket, "t/b.parquet", pa.table({"id": pa.array([2], pa.int64()), "b": [1.5]}))
    plain = _source(s3_endpoint.url, f"s3://{bucket}/t/").schema()
    assert plain.fieldNames() == ["id", "a"]
    source = _source(s3_endpoint.url, f"s3://{bucket}/t/", mergeSchema="true")
    schema = source.schema()
    assert schema.fieldNames() == ["id", "a", "b"] and schema["id"].dataType == LongType()
    reader = source.reader(schema)
    table = _read_all(reader, reader.partitions()).sort_by("id")
    assert table.to_pylist() == [{"id": 1, "a": "x", "b": None}, {"id": 2, "a": None, "b": 1.5}]
    # Spark 4.3 merges no two different types (decimals of one scale aside): int with bigint is an error.
    put_parquet(s3_client, bucket, "t/c.parquet", pa.table({"id": pa.array([3], pa.int32())}))
    with pytest.raises(SchemaMismatch, match=r"column 'id' is bigint .* but int in s3://.*/t/c\.parquet"):
        _source(s3_endpoint.url, f"s3://{bucket}/t/", mergeSchema="true").schema()


def test_automatic_registration_module_exposes_the_source():
    import pyspark_s3parquet

    assert pyspark_s3parquet.DefaultSource is S3ParquetDataSource
    assert issubclass(pyspark_s3parquet.DefaultSource, DataSource)


def test_a_file_listed_without_an_etag_is_read_by_every_task_at_the_version_planned(fake_aws_env):
    """A store whose listing gives no ETag, and a file split over tasks by row groups. Each task used to pin the
    version its own first answer gave, so a file overwritten between two tasks gave rows of both versions, with
    no error (2,000 rows of each in the review). Now every split carries the ETag its footer was read at while
    planning: the task after the overwrite fails with ObjectChanged."""
    versions = [
        parquet_bytes(
            pa.table({"id": pa.array(range(4000), pa.int64()), "v": pa.array([v] * 4000, pa.int64())}),
            row_group_size=1000,
        )
        for v in (1, 2)
    ]
    assert len(versions[0]) == len(versions[1])
    with ScriptedS3({"t/big.parquet": versions[0]}) as server:

        def etagless_listing(request: Request) -> Reply | None:
            if request.query.get("list-type") != "2":
                return None
            body = list_body(["t/big.parquet"], server.objects, "t/", False, False)
            return Reply(200, {}, re.sub(rb"<ETag>[^<]*</ETag>", b"<ETag></ETag>", body))

        server.script = etagless_listing
        source = _source(
            server.url,
            "s3://bucket/t/",
            wholeObjectThreshold="0",
            maxPartitionBytes=str(len(versions[0]) // 4),
            minPartitionNum="4",
        )
        reader = source.reader(source.schema())
        first, *rest = reader.partitions()
        assert rest
        assert set(_read_all(reader, [first]).column("v").to_pylist()) == {1}
        server.objects["t/big.parquet"] = versions[1]  # overwritten between two tasks
        with pytest.raises(ObjectChanged, match=r"s3://bucket/t/big\.parquet"):
            _read_all(reader, rest)


def test_tasks_read_from_the_store_the_driver_listed_whatever_their_own_environment_says(
    s3_endpoint, s3_client, bucket, monkeypatch
) -> None:
    """The endpoint and region come from the planning process's environment (no option names them) and travel with
    the reader: a task whose environment names another endpoint still reads the store that was listed."""
    for n in range(3):
        put_parquet(s3_client, bucket, f"t/f-{n}.parquet", _table(n * 10, 10))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    source = S3ParquetDataSource({"path": f"s3://{bucket}/t/", "maxattempts": "2"})
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    shipped = cloudpickle.dumps((reader, partitions))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the executors' environment: nothing listens
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    task_reader, task_partitions = pickle.loads(shipped)
    options = task_partitions[0].spec.options
    assert (options.store.endpoint, options.store.region) == (s3_endpoint.url, "us-east-1")
    table = _read_all(task_reader, task_partitions)
    assert sorted(table.column("id").to_pylist()) == list(range(30))
