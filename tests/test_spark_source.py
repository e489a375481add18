"""spark.read.format("s3parquet") in a local Spark session against moto: results identical to pyarrow reading the
same files, Spark's packing, pruning proven by the requests and bytes a proxy saw, faults, errors."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from support.spark_fixtures import column_checksums, download_prefix, put_parquet, spark_session  # noqa: F401

from s3io.s3.types import ObjectInfo
from spark_ext.planning.binpack import plan_partitions
from testbed.faultproxy import ErrorResponse, FaultRule, Reset, Stall

pytestmark = pytest.mark.timeout(300)

WIDE_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("i32", IntegerType()),
        StructField("score", DoubleType()),
        StructField("name", StringType()),
        StructField("flag", BooleanType()),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
        StructField("local", TimestampNTZType()),
        StructField("at_ns", TimestampType()),
        StructField("amount", DecimalType(10, 2)),
        StructField("tags", ArrayType(StringType())),
        StructField("small", ShortType()),
    ]
)


def _wide(start: int, n: int) -> pa.Table:
    ids = range(start, start + n)
    base = datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "i32": pa.array([i % 1000 for i in ids], pa.int32()),
            "score": pa.array([None if i % 11 == 0 else i / 3 for i in ids], pa.float64()),
            "name": pa.array([f"name-{i % 97}" if i % 13 else None for i in ids], pa.string()),
            "flag": pa.array([i % 2 == 0 for i in ids]),
            "day": pa.array([date(2024, 1, 1) + timedelta(days=i % 400) for i in ids], pa.date32()),
            "at": pa.array(
                [base + timedelta(seconds=i, microseconds=i % 1000) for i in ids], pa.timestamp("us", "UTC")
            ),
            "local": pa.array([datetime(2024, 5, 1) + timedelta(minutes=i) for i in ids], pa.timestamp("us")),
            "at_ns": pa.array([base + timedelta(milliseconds=i) for i in ids], pa.timestamp("ns", "UTC")),
            "amount": pa.array([Decimal(i) / 100 for i in ids], pa.decimal128(10, 2)),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) if i % 5 else None for i in ids], pa.list_(pa.string())),
            "small": pa.array([i % 256 for i in ids], pa.uint8()),
        }
    )


def _simple(start: int, n: int) -> pa.Table:
    ids = range(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"value-{i:08d}" for i in ids])})


def _load(spark, endpoint: str, path: str, schema: StructType | None = None, **options: str):
    reader = spark.read.format("s3parquet").option("endpoint", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(path)


def _assert_same(got: pa.Table, expected: pa.Table) -> None:
    """Same rows and columns, row order aside: counts, null counts and value digests per column."""
    assert got.num_rows == expected.num_rows
    assert column_checksums(got) == column_checksums(expected.select(got.column_names).cast(got.schema))


def _objects(s3_client, bucket: str, prefix: str) -> list[ObjectInfo]:
    items = s3_client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return [ObjectInfo(bucket, item["Key"], item["Size"]) for item in items]


def _data_gets(proxy) -> list:
    """GETs of parquet objects (listing requests excluded) the proxy served."""
    return [r for r in proxy.requests if r.method == "GET" and r.path.endswith(".parquet")]


# ------------------------------------------------------------------------------------------------ results


def test_flat_layout_matches_pyarrow_and_packs_small_files_like_spark(spark, s3_endpoint, bucket, s3_client, tmp_path):
    for i in range(24):
        put_parquet(s3_client, bucket, f"flat/part-{i:05d}.parquet", _wide(i * 300, 200 + 10 * i))
    s3_client.put_object(Bucket=bucket, Key="flat/_SUCCESS", Body=b"")
    df = _load(spark, s3_endpoint.url, f"s3://{bucket}/flat/")
    assert df.schema == WIDE_SCHEMA
    expected = pq.read_table(download_prefix(s3_client, bucket, "flat/", tmp_path))
    _assert_same(df.toArrow(), expected)
    assert df.count() == expected.num_rows
    packed = plan_partitions(_objects(s3_client, bucket, "flat/part-"), min_partitions=2)
    assert df.rdd.getNumPartitions() == len(packed) == 2


def test_hive_layout_matches_pyarrow_and_partition_paths_read_only_matching_files(
    spark, s3_endpoint, bucket, s3_client, fault_proxy, tmp_path
):
    for year in (2023, 2024):
        for month in (1, 2, 3):
            for part in range(2):
                start = (year * 100 + month) * 1000 + part * 500
                put_parquet(s3_client, bucket, f"hive/year={year}/month={month}/p{part}.parquet", _simple(start, 400))
    df = _load(spark, fault_proxy.url, f"s3://{bucket}/hive/")
    assert df.schema.fieldNames() == ["id", "v", "year", "month"]
    assert df.schema["year"].dataType == IntegerType()
    dataset = ds.dataset(download_prefix(s3_client, bucket, "hive/", tmp_path), format="parquet", partitioning="hive")
    _assert_same(df.toArrow(), dataset.to_table())

    fault_proxy.reset_log()  # pruning by path (filter pushdown is refused on PySpark 4.3: test_spark_pushdown.py)
    paths = [f"s3://{bucket}/hive/year=2024/month={{1,3}}/"]
    pruned = _load(spark, fault_proxy.url, paths[0], basePath=f"s3://{bucket}/hive/").toArrow()
    expected = dataset.to_table(filter=(pc.field("year") == 2024) & pc.field("month").isin([1, 3]))
    _assert_same(pruned, expected)
    read_keys = {unquote(r.path.split("/", 2)[2]) for r in _data_gets(fault_proxy)}
    assert read_keys == {f"hive/year=2024/month={m}/p{p}.parquet" for m in (1, 3) for p in (0, 1)}


def test_several_paths_s3a_urls_globs_and_base_path(spark, s3_endpoint, bucket, s3_client):
    for year in (2023, 2024):
        for month in (1, 2):
            put_parquet(s3_client, bucket, f"g/year={year}/month={month}/a.parquet", _simple(year * 100 + month, 1))
    paths = [f"s3a://{bucket}/g/year=2023/month=1/", f"s3://{bucket}/g/year=2024/month={{1,2}}/"]
    df = (
        spark.read.format("s3parquet")
        .option("endpoint", s3_endpoint.url)
        .option("basePath", f"s3://{bucket}/g/")
        .load(paths)  # arrives as JSON in options["paths"]
    )
    assert df.schema.fieldNames() == ["id", "v", "year", "month"]
    assert sorted((r.id, r.year, r.month) for r in df.collect()) == [
        (202301, 2023, 1),
        (202401, 2024, 1),
        (202402, 2024, 2),
    ]


def test_mixed_small_and_large_files_split_large_ones_at_row_groups(spark, s3_endpoint, bucket, s3_client, tmp_path):
    for i in range(2):
        put_parquet(s3_client, bucket, f"mixed/big-{i}.parquet", _simple(i * 100_000, 40_000), row_group_size=4_000)
    for i in range(10):
        put_parquet(s3_client, bucket, f"mixed/small-{i}.parquet", _simple(500_000 + i * 100, 50))
    options = {"maxPartitionBytes": "128KiB", "openCostInBytes": "8KiB"}
    df = _load(spark, s3_endpoint.url, f"s3://{bucket}/mixed/", **options)
    row_groups = {}
    for i in range(2):
        body = s3_client.get_object(Bucket=bucket, Key=f"mixed/big-{i}.parquet")["Body"].read()
        md = pq.ParquetFile(pa.BufferReader(body)).metadata
        row_groups[f"mixed/big-{i}.parquet"] = [
            sum(md.row_group(rg).column(c).total_compressed_size for c in range(md.num_columns))
            for rg in range(md.num_row_groups)
        ]
    packed = plan_partitions(
        _objects(s3_client, bucket, "mixed/"),
        max_partition_bytes=128 * 1024,
        open_cost=8 * 1024,
        min_partitions=2,
        row_group_sizes=row_groups,
    )
    assert sum(1 for group in packed for split in group if split.row_groups is not None) > 4
    assert df.rdd.getNumPartitions() == len(packed)
    expected = pq.read_table(download_prefix(s3_client, bucket, "mixed/", tmp_path))
    _assert_same(df.toArrow(), expected)


def test_merge_schema_matches_pyarrow_with_unified_schema(spark, s3_endpoint, bucket, s3_client, tmp_path):
    put_parquet(s3_client, bucket, "m/a.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "a": ["x", "y"]}))
    put_parquet(s3_client, bucket, "m/b.parquet", pa.table({"id": pa.array([3], pa.int64()), "b": [2.5]}))
    df = _load(spark, s3_endpoint.url, f"s3://{bucket}/m/", mergeSchema="true")
    assert df.schema.simpleString() == "struct<id:bigint,a:string,b:double>"
    root = download_prefix(s3_client, bucket, "m/", tmp_path)
    unified = pa.unify_schemas(
        [pq.read_schema(p) for p in sorted(root.glob("*.parquet"))], promote_options="permissive"
    )
    _assert_same(df.toArrow(), ds.dataset(root, schema=unified, format="parquet").to_table())
    plain = _load(spark, s3_endpoint.url, f"s3://{bucket}/m/")
    assert plain.schema.simpleString() == "struct<id:bigint,a:string>"


def test_user_schema_reads_only_its_columns_and_fewer_bytes(spark, bucket, s3_client, fault_proxy):
    wide = _simple(0, 20_000).append_column("blob", pa.array([f"{i:0>300}" for i in range(20_000)]))
    put_parquet(s3_client, bucket, "u/a.parquet", wide, compression="none", row_group_size=5_000)
    path = f"s3://{bucket}/u/"
    narrow_schema = StructType([StructField("id", LongType()), StructField("v", StringType())])

    def gets_bytes(df):
        fault_proxy.reset_log()
        table = df.toArrow()
        return table, sum(r.body_bytes_sent for r in _data_gets(fault_proxy))

    full, full_bytes = gets_bytes(_load(spark, fault_proxy.url, path, wholeObjectThreshold="0"))
    narrow, narrow_bytes = gets_bytes(_load(spark, fault_proxy.url, path, narrow_schema, wholeObjectThreshold="0"))
    assert narrow.column_names == ["id", "v"]
    _assert_same(narrow, full.select(["id", "v"]))
    assert narrow_bytes * 5 < full_bytes


# ------------------------------------------------------------------------------------------------ faults


def test_faults_during_a_spark_read_give_identical_results(spark, s3_endpoint, bucket, s3_client, fault_proxy):
    for i in range(12):
        put_parquet(s3_client, bucket, f"faults/part-{i:02d}.parquet", _simple(i * 3_000, 3_000))
    clean = _load(spark, s3_endpoint.url, f"s3://{bucket}/faults/").toArrow()
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=2_000), method="GET", path=r"\.parquet", times=2))
    fault_proxy.add_rule(FaultRule(fault=Reset(after_bytes=1_000), method="GET", path=r"\.parquet", times=2))
    slow_down = fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", probability=0.2))
    df = _load(
        spark, fault_proxy.url, f"s3://{bucket}/faults/", stallTimeout="1s", backoffBase="20ms", backoffCap="200ms"
    )
    _assert_same(df.toArrow(), clean)
    assert fault_proxy.fired(slow_down) > 0
    faults = [type(r.fault).__name__ for r in fault_proxy.requests if r.fault is not None]
    assert faults.count("Stall") == 2 and faults.count("Reset") == 2


# ------------------------------------------------------------------------------------------------ errors


def test_unknown_option_is_a_readable_error_naming_it(spark, s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "e/a.parquet", _simple(0, 10))
    with pytest.raises(Exception, match=r"unknown option 'maxpartitonbytes'") as caught:  # keys arrive lower-cased
        _load(spark, s3_endpoint.url, f"s3://{bucket}/e/", maxPartitonBytes="1m")
    assert "did you mean maxPartitionBytes" in str(caught.value)


def test_corrupt_file_error_names_the_file_and_ignore_corrupt_files_skips_it(spark, s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "c/a.parquet", _simple(0, 10))
    s3_client.put_object(Bucket=bucket, Key="c/b.parquet", Body=b"PAR1" + b"\0" * 100 + b"PAR1")
    df = _load(spark, s3_endpoint.url, f"s3://{bucket}/c/")
    with pytest.raises(Exception, match=f"s3://{bucket}/c/b.parquet"):
        df.count()
    tolerant = _load(spark, s3_endpoint.url, f"s3://{bucket}/c/", ignoreCorruptFiles="true")
    assert tolerant.count() == 10


def test_file_deleted_after_load_fails_the_read_unless_ignore_missing_files(spark, s3_endpoint, bucket, s3_client):
    put_parquet(s3_client, bucket, "d/a.parquet", _simple(0, 10))
    put_parquet(s3_client, bucket, "d/b.parquet", _simple(10, 10))
    strict = _load(spark, s3_endpoint.url, f"s3://{bucket}/d/")
    tolerant = _load(spark, s3_endpoint.url, f"s3://{bucket}/d/", ignoreMissingFiles="true")
    s3_client.delete_object(Bucket=bucket, Key="d/b.parquet")
    with pytest.raises(Exception, match=f"s3://{bucket}/d/b.parquet"):
        strict.collect()
    assert sorted(r.id for r in tolerant.collect()) == list(range(10))


def test_a_file_overwritten_after_load_fails_the_read_with_object_changed(spark, s3_endpoint, bucket, s3_client):
    """A deliberate difference (docs/spark.md): every GET is pinned to the ETag listed at load()."""
    put_parquet(s3_client, bucket, "o/a.parquet", _simple(0, 10))
    df = _load(spark, s3_endpoint.url, f"s3://{bucket}/o/")
    put_parquet(s3_client, bucket, "o/a.parquet", _simple(100, 10))
    with pytest.raises(Exception, match=rf"ObjectChanged[\s\S]*s3://{bucket}/o/a\.parquet"):
        df.collect()
    assert sorted(r.id for r in _load(spark, s3_endpoint.url, f"s3://{bucket}/o/").collect()) == list(range(100, 110))
    documented = (Path(__file__).resolve().parent.parent / "docs" / "spark.md").read_text()
    assert "A file overwritten after `load()` fails the read with `ObjectChanged`" in documented
