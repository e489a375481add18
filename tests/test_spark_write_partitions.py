"""Partition directories as Spark names them, with Spark's own writer as the oracle: the same rows written by
``df.write.partitionBy(...).parquet(local dir)`` and by s3parquet (``partitionBy`` as an option) give the same
directory names, for every partition type s3parquet writes (years before 1000 zero-padded, timestamps with and
without fractions, decimals, booleans, nulls, escaped characters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.spark_fixtures import spark_session  # noqa: F401  (`spark`)

pytestmark = pytest.mark.timeout(600)

# one row per case; every column but `id` is a partition column, so each row names a directory of its own
CASES = """
select * from values
  (0, 7, cast(-3 as bigint), true, date'0001-01-01', timestamp'0001-01-01 00:00:00', cast(1.50 as decimal(10, 2)),
   cast(0.000000000000000001 as decimal(38, 18)), 'plain'),
  (1, -1, cast(9000000000 as bigint), false, date'0999-12-31', timestamp'0999-12-31 23:59:59.5',
   cast(-0.01 as decimal(10, 2)),
   cast(12345678901234567890.123456789012345678 as decimal(38, 18)), 'a/b:c=d%e#f?g'),
  (2, 0, cast(0 as bigint), null, date'2024-06-01', timestamp'2024-06-01 12:34:56.000001', cast(0 as decimal(10, 2)),
   cast(null as decimal(38, 18)), ''),
  (3, null, null, true, null, null, null, cast(100 as decimal(38, 18)), null),
  (4, 5, cast(5 as bigint), false, date'1969-12-31', timestamp'1969-12-31 23:59:59.123',
   cast(12345678.9 as decimal(10, 2)),
   cast(1 as decimal(38, 18)), 'space and [brackets] {braces} ^caret\\'quote"'),
  (5, 6, cast(6 as bigint), true, date'9999-12-31', timestamp'9999-12-31 23:59:59.999999', cast(99 as decimal(10, 2)),
   cast(-1.5 as decimal(38, 18)), 'ünïcödé')
as t(id, i, l, b, dt, ts, dec, bigdec, s)
"""
PARTITIONS = ["i", "l", "b", "dt", "ts", "dec", "bigdec", "s"]


def directories(root: Path) -> list[str]:
    """The partition directories under ``root`` holding a data file, relative, as Spark's listing decodes nothing."""
    return sorted(str(p.parent.relative_to(root)) for p in root.rglob("*.parquet") if not p.name.startswith("."))


def test_partition_directories_match_spark_own_writer_for_every_type(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    from support.spark_fixtures import download_prefix

    df = spark.sql(CASES).repartition(1)
    oracle = tmp_path / "by_spark"
    df.write.partitionBy(*PARTITIONS).parquet(str(oracle))

    url = f"s3://{bucket}/partitions/"
    (
        df.write.format("s3parquet")
        .mode("append")
        .option("endpoint", s3_endpoint.url)
        .option("gracePeriod", "0.2s")
        .option("partitionBy", ",".join(PARTITIONS))
        .save(url)
    )
    copy = download_prefix(s3_client, bucket, "partitions/", tmp_path / "by_s3parquet")
    assert directories(copy) == directories(oracle)
    assert len(directories(oracle)) == 6
    # and Spark infers the same partition types from either
    assert spark.read.parquet(str(copy)).schema == spark.read.parquet(str(oracle)).schema
