"""The main job, end to end: an embedded S3, a landing zone of small parquet files, a Spark read that packs them
into few partitions, a compaction, and a second read proving nothing was lost or duplicated.

    python -m examples.demo                          # embedded moto S3 on 127.0.0.1
    python -m examples.demo --endpoint-url URL       # a real S3-compatible endpoint (bucket must exist or be creatable)

Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import s3io
import spark_ext
from s3io import Policy, S3Client
from s3io.compaction import ProgressBar
from spark_ext.session import local_session

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")


@dataclass(frozen=True)
class Checksum:
    """What must be identical before and after compaction."""

    rows: int
    id_sum: int
    amount_sum: float
    users: int

    def __str__(self) -> str:
        return f"rows={self.rows} sum(id)={self.id_sum} sum(amount)={self.amount_sum:.2f} users={self.users}"


@contextlib.contextmanager
def embedded_s3() -> Iterator[str]:
    """moto's S3 server on a free loopback port (the test suite's launcher, testbed/moto_server.py, lenient: moto as
    it is), with credentials for this process and Spark's workers unless the environment has its own."""
    from testbed.moto_server import MotoServer

    for name, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo"), ("AWS_REGION", "us-east-1")):
        os.environ.setdefault(name, value)
    with MotoServer(strict=False) as endpoint:
        yield endpoint.url


def landing_zone(files_per_day: int, seed: int = 7) -> dict[str, pa.Table]:
    """Small parquet files as a streaming sink leaves them: many per Hive partition, a few hundred rows each."""
    rng = random.Random(seed)
    files: dict[str, pa.Table] = {}
    next_id = 0
    for day in DAYS:
        for n in range(files_per_day):
            rows = rng.randint(200, 600)
            ids = list(range(next_id, next_id + rows))
            next_id += rows
            start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
            files[f"landing/day={day}/part-{n:05d}-{uuid.UUID(int=rng.getrandbits(128))}.parquet"] = pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "user": pa.array([f"user-{rng.randint(0, 999):03d}" for _ in ids]),
                    "amount": pa.array([round(rng.uniform(1, 500), 2) for _ in ids]),
                    "ts": pa.array(
                        [start + dt.timedelta(seconds=rng.randint(0, 86399)) for _ in ids], pa.timestamp("us", "UTC")
                    ),
                }
            )
    return files


def truth(files: dict[str, pa.Table]) -> Checksum:
    table = pa.concat_tables(files.values())
    return Checksum(
        rows=table.num_rows,
        id_sum=pc.sum(table["id"]).as_py(),
        amount_sum=round(pc.sum(table["amount"]).as_py(), 2),
        users=len(pc.unique(table["user"])),
    )


async def upload(files: dict[str, pa.Table], bucket: str, endpoint: str | None) -> None:
    """Write the landing zone through s3io itself, 32 objects at a time."""
    async with S3Client(Policy(), endpoint_url=endpoint) as s3:
        await s3.create_bucket(bucket)
        slots = asyncio.Semaphore(32)

        async def put(key: str, table: pa.Table) -> None:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            async with slots:
                await s3.put_object(bucket, key, sink.getvalue().to_pybytes())

        await asyncio.gather(*(put(key, table) for key, table in files.items()))


def spark_read(spark, url: str, endpoint: str | None) -> tuple[Checksum, int]:
    reader = spark.read.format("s3parquet")
    if endpoint:
        reader = reader.option("endpoint", endpoint)
    df = reader.load(url)
    partitions = df.rdd.getNumPartitions()
    row = df.selectExpr(
        "count(*) AS rows", "sum(id) AS id_sum", "round(sum(amount), 2) AS amount_sum", "count(DISTINCT user) AS users"
    ).collect()[0]
    return Checksum(row.rows, row.id_sum, float(row.amount_sum), row.users), partitions


async def count_files(bucket: str, prefix: str, endpoint: str | None) -> tuple[int, int]:
    async with S3Client(Policy(), endpoint_url=endpoint) as s3:
        objects = [o async for o in s3.list_objects(bucket, prefix) if "/_" not in o.key]
    return len(objects), sum(o.size for o in objects)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint-url", help="use this S3 endpoint instead of the embedded one")
    parser.add_argument("--bucket", default="s3io-demo")
    parser.add_argument("--files-per-day", type=int, default=200, help="small files per Hive partition (default 200)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        endpoint = args.endpoint_url or stack.enter_context(embedded_s3())
        url = f"s3://{args.bucket}/landing/"
        print(f"S3 endpoint      {endpoint}")

        files = landing_zone(args.files_per_day)
        expected = truth(files)
        started = time.perf_counter()
        asyncio.run(upload(files, args.bucket, endpoint))
        count, size = asyncio.run(count_files(args.bucket, "landing/", endpoint))
        print(
            f"landing zone     {count} small parquet files, {size / 1024:.0f} KiB, {len(DAYS)} Hive partitions "
            f"(written in {time.perf_counter() - started:.1f}s)"
        )
        print(f"expected         {expected}")

        spark = local_session(args.master, "s3io-demo")
        stack.callback(spark.stop)
        started = time.perf_counter()
        before, partitions_before = spark_read(spark, url, endpoint)
        print(
            f"read (before)    {before}  — {count} files packed into {partitions_before} Spark partitions "
            f"({time.perf_counter() - started:.1f}s)"
        )

        report = spark_ext.compact(
            spark,
            url,
            endpoint_url=endpoint,
            target_file_size=64 * 1024 * 1024,
            grace_period=1.0,
            progress=ProgressBar(),
        )
        print(report.to_text())

        count_after, size_after = asyncio.run(count_files(args.bucket, "landing/", endpoint))
        started = time.perf_counter()
        after, partitions_after = spark_read(spark, url, endpoint)
        print(
            f"read (after)     {after}  — {count_after} files ({size_after / 1024:.0f} KiB) in "
            f"{partitions_after} Spark partitions ({time.perf_counter() - started:.1f}s)"
        )
        table = s3io.read_parquet(url, endpoint_url=endpoint)
        plain = Checksum(
            table.num_rows,
            pc.sum(table["id"]).as_py(),
            round(pc.sum(table["amount"]).as_py(), 2),
            len(pc.unique(table["user"])),
        )
        print(f"s3io.read_parquet {plain}")

    checks = {
        "Spark read before compaction matches the data written": before == expected,
        "Spark read after compaction matches the data written": after == expected,
        "s3io.read_parquet after compaction matches too": plain == expected,
        "ids are unique after compaction (no duplicate row)": table.num_rows == len(pc.unique(table["id"])),
        f"compaction finished (status {report.status})": report.status == "ok",
        f"fewer files ({count} -> {count_after})": count_after < count,
        f"small files merged into fewer Spark partitions ({count} files -> {partitions_before} partitions)": (
            partitions_before < count
        ),
    }
    print("\nsummary")
    for text, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
