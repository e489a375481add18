"""Child process of the ``scale`` benchmark: one planning step over a prefix of many files, measured alone.

``python -m benchmarks.scale_probe WHAT ENDPOINT URL`` prints one JSON line: seconds (wall), peak RSS (MiB, the
process's VmHWM), and what the step produced (objects, partitions, pickled bytes). Each step runs in a fresh
process so its peak memory is its own. WHAT is ``list`` (s3io's listing), ``batch`` (s3parquet's ``load()`` and
``partitions()``, as Spark's planner worker runs them), ``stream`` (a stream's first trigger, 10,000 files) or
``compaction`` (``spark_ext.compact`` dry run: listing and a plan from it).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from typing import Any

from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY

STREAM_FILES_PER_TRIGGER = 10_000


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux keeps that across exec, so a probe started
    by a large parent would report the parent's size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _options(endpoint: str, url: str, **extra: str) -> dict[str, str]:
    return {
        "path": url,
        "endpoint": endpoint,
        "region": REGION,
        "accessKeyId": ACCESS_KEY,
        "secretAccessKey": SECRET_KEY,
        **extra,
    }


def _pickled(values: list[Any]) -> dict[str, int]:
    from pyspark import cloudpickle

    sizes = [len(cloudpickle.dumps(v)) for v in values]
    return {"pickled_max": max(sizes, default=0), "pickled_median": int(statistics.median(sizes)) if sizes else 0}


def list_only(endpoint: str, url: str) -> dict[str, Any]:
    import asyncio

    import s3io
    from s3io.urls import split_s3_url

    bucket, prefix = split_s3_url(url)

    async def count() -> int:
        async with s3io.S3Client(
            endpoint_url=endpoint, region=REGION, credentials=s3io.Credentials(ACCESS_KEY, SECRET_KEY)
        ) as s3:
            return sum([1 async for _ in s3.list_objects(bucket, prefix)])

    return {"objects": asyncio.run(count())}


def batch(endpoint: str, url: str) -> dict[str, Any]:
    from pyspark import cloudpickle

    from spark_ext.datasource import S3ParquetDataSource

    started = time.perf_counter()
    source = S3ParquetDataSource(_options(endpoint, url, minPartitionNum="200"))
    schema = source.schema()  # lists, then reads the footers it needs (as load() does)
    schemaed = time.perf_counter()
    shipped = cloudpickle.dumps(source)  # Spark ships the source from the schema worker to the planner worker
    source = cloudpickle.loads(shipped)
    source_bytes = len(shipped)
    handed_over = time.perf_counter()
    reader = source.reader(schema)
    partitions = list(reader.partitions())
    done = time.perf_counter()
    reader_bytes = len(cloudpickle.dumps(reader))  # travels with the read function into every task
    return {
        "listing_and_schema_s": round(schemaed - started, 2),
        "handover_s": round(handed_over - schemaed, 2),
        "plan_s": round(done - handed_over, 2),
        "partitions": len(partitions),
        "source_pickled": source_bytes,
        "reader_pickled": reader_bytes,
        **_pickled(partitions),
    }


def stream(endpoint: str, url: str) -> dict[str, Any]:
    from pyspark.sql.streaming.datasource import ReadMaxFiles
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    from spark_ext.stream.stream_options import StreamOptions
    from spark_ext.stream.stream_reader import S3ParquetStreamReader

    options = StreamOptions.from_options(_options(endpoint, url, streamName=f"scale-{time.time_ns()}"))
    schema = StructType([StructField("id", LongType()), StructField("d", IntegerType())])
    reader = S3ParquetStreamReader(options, schema, default_parallelism=200)
    try:
        offset = reader.latestOffset({"batch": -1}, ReadMaxFiles(STREAM_FILES_PER_TRIGGER))
        partitions = list(reader.partitions({"batch": -1}, offset))
    finally:
        reader.stop()
    return {"partitions": len(partitions), "files": sum(len(p.pieces) for p in partitions), **_pickled(partitions)}


def compaction(endpoint: str, url: str) -> dict[str, Any]:
    import s3io
    import spark_ext

    report = spark_ext.compact(
        None,
        url,
        endpoint_url=endpoint,
        region=REGION,
        credentials=s3io.Credentials(ACCESS_KEY, SECRET_KEY),
        dry_run=True,
        min_input_files=2,
    )
    return {
        "status": report.status,
        "groups": len(report.plan.groups) if report.plan else 0,
        "requests": report.requests,
    }


STEPS = {"list": list_only, "batch": batch, "stream": stream, "compaction": compaction}


def main(argv: list[str]) -> None:
    what, endpoint, url = argv
    started = time.perf_counter()
    result = STEPS[what](endpoint, url)
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["peak_rss_mib"] = round(peak_rss_kib() / 1024, 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
