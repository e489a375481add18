"""Read parquet files on S3 with Spark through s3io: ``spark.read.format("s3parquet")``.

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/spark_read.py s3://bucket/table/
    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/spark_read.py s3://bucket/table/ \\
        --where "year = 2024" --pushdown --option maxPartitionBytes=64MiB --option stallTimeout=3s
    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/spark_read.py s3://bucket/demo/ --write-sample

``--write-sample`` first writes a small Hive-partitioned table (year=/month= directories, 24 files) under the
URL (the bucket must exist). Credentials and region come from the usual AWS environment variables; the Python
workers inherit them, and AWS_ENDPOINT_URL, from this process (local mode). ``--pushdown`` registers the reader
with filter pushdown (partition filters prune files, data filters prune row groups); see docs/spark.md for why it
is opt-in. Needs PySpark >= 4.1 and Java 17.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

import spark_ext
from s3io import S3Client
from s3io.urls import split_s3_url


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="s3://bucket/prefix/ (s3a:// too; globs allowed)")
    parser.add_argument("--where", help='a SQL filter, e.g. "year = 2024 AND id > 10"')
    parser.add_argument("--pushdown", action="store_true", help="register the reader with filter pushdown")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a read option")
    parser.add_argument("--write-sample", action="store_true", help="write a small partitioned table first")
    args = parser.parse_args(argv)

    if args.write_sample:
        asyncio.run(write_sample(args.url))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this interpreter's pyarrow and s3io

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("s3parquet-example")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    try:
        spark_ext.register(spark, filter_pushdown=args.pushdown)
        reader = spark.read.format("s3parquet")
        for item in args.option:
            key, _, value = item.partition("=")
            reader = reader.option(key, value)
        started = time.monotonic()
        df = reader.load(args.url)
        if args.where:
            df = df.where(args.where)
        rows = df.count()
        elapsed = time.monotonic() - started
        print(f"{rows} rows in {elapsed:.2f}s; schema:")
        df.printSchema()
        df.show(5, truncate=False)
    finally:
        spark.stop()
    return 0


async def write_sample(url: str) -> None:
    """24 small parquet files under url: year=2023|2024 / month=1..12 / part-0.parquet."""
    bucket, prefix = split_s3_url(url)
    prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    async with S3Client() as s3:
        for year in (2023, 2024):
            for month in range(1, 13):
                start = (year * 100 + month) * 1000
                table = pa.table({"id": pa.array(range(start, start + 1000), pa.int64()), "x": [0.5] * 1000})
                sink = io.BytesIO()
                pq.write_table(table, sink)
                await s3.put_object(bucket, f"{prefix}year={year}/month={month}/part-0.parquet", sink.getvalue())
    print(f"wrote 24 files under s3://{bucket}/{prefix}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
