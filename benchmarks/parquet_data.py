"""Seeded parquet data sets on moto, and the checksum every reader's table must reproduce.

Why seeded: the same command must upload the same bytes on every machine, so figures and checksums compare.
Files are generated locally with pyarrow (file i from its own generator, so threads cannot reorder the data)
and uploaded straight to moto by boto3 in parallel threads; the proxy never sees set-up traffic.
"""

from __future__ import annotations

import hashlib
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Stack

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


def make_table(file_index: int, rows: int) -> pa.Table:
    """File `file_index`: unique int64 ids, random int64 and float64 columns, a low-cardinality string."""
    rng = np.random.default_rng([SEED, file_index])
    first_id = file_index * rows
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "x": pa.array(rng.integers(0, 2**31, rows, dtype=np.int64)),
            "v": pa.array(rng.random(rows)),
            "category": pa.array(np.asarray(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), rows)]),
        }
    )


def _sums(table: pa.Table) -> tuple[int, int, int, int]:
    """Rows and column sums: additive over files, and independent of the order files are read in."""
    if table.num_rows == 0:
        return (0, 0, 0, 0)
    return (
        table.num_rows,
        pc.sum(table["id"]).as_py(),
        pc.sum(table["x"]).as_py(),
        pc.sum(pc.utf8_length(table["category"].cast(pa.string()))).as_py(),
    )


def _digest(sums: tuple[int, ...]) -> str:
    return hashlib.sha256(":".join(map(str, sums)).encode()).hexdigest()[:12]


def checksum(table: pa.Table) -> str:
    """Order-independent digest of the integer and string columns (the float column's sum is order-dependent)."""
    return _digest(_sums(table))


def _parquet_bytes(table: pa.Table, row_group_rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_rows)
    return sink.getvalue()


def build(stack: Stack, spec: Spec) -> Dataset:
    """Generate and upload the files (public-read, so the unsigned raw-GET rows may fetch them)."""
    import boto3

    started = time.perf_counter()
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.moto_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    s3.create_bucket(Bucket=spec.bucket)
    width = len(str(spec.files - 1))

    def upload(index: int) -> tuple[str, int, tuple[int, int, int, int]]:
        table = make_table(index, spec.rows_per_file)
        body = _parquet_bytes(table, spec.row_group_rows)
        key = f"{spec.prefix}/part-{index:0{width}d}.parquet"
        s3.put_object(Bucket=spec.bucket, Key=key, Body=body, ACL="public-read")
        return key, len(body), _sums(table)

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        uploaded = list(pool.map(upload, range(spec.files)))
    totals = tuple(sum(column) for column in zip(*(sums for _, _, sums in uploaded), strict=True))
    return Dataset(
        spec=spec,
        keys=tuple(key for key, _, _ in uploaded),
        sizes=tuple(size for _, size, _ in uploaded),
        rows=totals[0],
        checksum=_digest(totals),
        seconds_to_build=time.perf_counter() - started,
    )
