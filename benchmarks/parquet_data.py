"""Seeded parquet data sets on moto, and the checksum every reader's table must reproduce.

Why seeded: the same command must upload the same bytes on every machine, so figures and checksums compare.
Files are generated locally with pyarrow (file i from its own generator, so threads cannot reorder the data)
and uploaded straight to the server (moto or the in-memory endpoint, by URL) by boto3 in parallel threads;
the proxy and the request counts never see set-up traffic. `build` can
also write the same bytes to a local directory (for Spark's built-in reader); `upload_objects` and
`delete_prefix` serve benchmarks that lay out their own keys (compaction's Hive partitions).
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY

SEED = 20240611
CATEGORIES = tuple(f"category-{i:02d}" for i in range(16))
UPLOAD_THREADS = 8


@dataclass(frozen=True)
class Spec:
    """What to generate: `files` files of `rows_per_file` rows, row groups of at most `row_group_rows`."""

    bucket: str
    prefix: str
    files: int
    rows_per_file: int
    row_group_rows: int


@dataclass(frozen=True)
class Dataset:
    """What was uploaded: keys with their sizes, and the rows and checksum a complete read must give."""

    spec: Spec
    keys: tuple[str, ...]
    sizes: tuple[int, ...]
    rows: int
    checksum: str
    seconds_to_build: float

    @property
    def bucket(self) -> str:
        return self.spec.bucket

    @property
    def prefix(self) -> str:
        return self.spec.prefix

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)


def make_table(file_index: int, rows: int, first_id: int | None = None) -> pa.Table:
    """File `file_index`: unique int64 ids (from `first_id`, default file_index x rows), random int64 and float64
    columns, a low-cardinality string."""
    rng = np.random.default_rng([SEED, file_index])
    first_id = file_index * rows if first_id is None else first_id
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "x": pa.array(rng.integers(0, 2**31, rows, dtype=np.int64)),
            "v": pa.array(rng.random(rows)),
            "category": pa.array(np.asarray(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), rows)]),
        }
    )


def table_sums(table: pa.Table) -> tuple[int, int, int, int]:
    """Rows and column sums: additive over files, and independent of the order files are read in."""
    if table.num_rows == 0:
        return (0, 0, 0, 0)
    return (
        table.num_rows,
        pc.sum(table["id"]).as_py(),
        pc.sum(table["x"]).as_py(),
        pc.sum(pc.utf8_length(table["category"].cast(pa.string()))).as_py(),
    )


def digest(sums: Sequence[int]) -> str:
    """The checksum of (rows, sum(id), sum(x), sum of `category` lengths), however they were computed."""
    return hashlib.sha256(":".join(map(str, sums)).encode()).hexdigest()[:12]


def checksum(table: pa.Table) -> str:
    """Order-independent digest of the integer and string columns (the float column's sum is order-dependent)."""
    return digest(table_sums(table))


def add_sums(sums: Iterable[Sequence[int]]) -> tuple[int, ...]:
    """Column-wise totals of several files' `table_sums`."""
    return tuple(sum(column) for column in zip(*sums, strict=True))


def parquet_bytes(table: pa.Table, row_group_rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_rows)
    return sink.getvalue()


def s3_client(url: str) -> Any:
    """A boto3 S3 client straight to the server at `url` (set-up traffic never goes through the proxy)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )


def upload_objects(url: str, bucket: str, objects: Sequence[tuple[str, bytes]]) -> None:
    """Create `bucket` if needed and upload (key, body) pairs straight to the server at `url`, UPLOAD_THREADS
    at a time."""
    s3 = s3_client(url)
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass

    def upload(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=bucket, Key=item[0], Body=item[1])

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        list(pool.map(upload, objects))


def delete_prefix(url: str, bucket: str, prefix: str) -> int:
    """Delete every object under `prefix` straight on the server at `url` (hidden ones too); returns how many."""
    s3 = s3_client(url)
    deleted = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            deleted += len(keys)
    return deleted


def build(url: str, spec: Spec, *, local_copy: Path | None = None) -> Dataset:
    """Generate and upload the files to the server at `url` (public-read, so the unsigned raw-GET rows may
    fetch them); with `local_copy`, also write the same bytes under that directory (same relative keys, prefix
    dropped)."""
    started = time.perf_counter()
    s3 = s3_client(url)
    s3.create_bucket(Bucket=spec.bucket)
    width = len(str(spec.files - 1))

    def upload(index: int) -> tuple[str, int, tuple[int, int, int, int]]:
        table = make_table(index, spec.rows_per_file)
        body = parquet_bytes(table, spec.row_group_rows)
        name = f"part-{index:0{width}d}.parquet"
        s3.put_object(Bucket=spec.bucket, Key=f"{spec.prefix}/{name}", Body=body, ACL="public-read")
        if local_copy is not None:
            (local_copy / name).write_bytes(body)
        return f"{spec.prefix}/{name}", len(body), table_sums(table)

    if local_copy is not None:
        local_copy.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        uploaded = list(pool.map(upload, range(spec.files)))
    totals = add_sums(sums for _, _, sums in uploaded)
    return Dataset(
        spec=spec,
        keys=tuple(key for key, _, _ in uploaded),
        sizes=tuple(size for _, size, _ in uploaded),
        rows=totals[0],
        checksum=digest(totals),
        seconds_to_build=time.perf_counter() - started,
    )
