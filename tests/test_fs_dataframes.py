"""pandas and pyarrow read parquet through s3io.fs.S3FileSystem exactly as they read the same bytes locally."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from s3io.fs import S3FileSystem
from testbed.moto_server import boto3_client

pytestmark = pytest.mark.timeout(60)


def parquet_bytes(seed: int, rows: int = 3000) -> bytes:
    table = pa.table(
        {
            "id": pa.array(range(seed * rows, (seed + 1) * rows), pa.int64()),
            "name": pa.array([f"row-{seed}-{i}" for i in range(rows)]),
            "score": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=700)  # several row groups: several ranged reads
    return sink.getvalue()


@pytest.fixture
def fs(s3_endpoint: Any) -> Iterator[S3FileSystem]:
    filesystem = S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    try:
        yield filesystem
    finally:
        filesystem.close()


@pytest.fixture
def files(bucket: str, s3_endpoint: Any) -> dict[str, bytes]:
    client = boto3_client(s3_endpoint.url)
    out = {}
    for seed in range(3):
        key = f"table/part-{seed}.parquet"
        out[key] = parquet_bytes(seed)
        client.put_object(Bucket=bucket, Key=key, Body=out[key])
    return out


def test_pandas_read_parquet_from_an_s3io_url_matches_local_bytes(
    bucket: str, files: dict[str, bytes], s3_endpoint: Any
) -> None:
    key = "table/part-1.parquet"
    expected = pq.read_table(io.BytesIO(files[key])).to_pandas()
    got = pd.read_parquet(f"s3io://{bucket}/{key}", storage_options={"endpoint_url": s3_endpoint.url})
    pd.testing.assert_frame_equal(got, expected)


def test_pandas_reads_columns_through_the_s3io_client(fs: S3FileSystem, bucket: str, files: dict[str, bytes]) -> None:
    key = "table/part-2.parquet"
    before = fs.stats()
    with fs.open(f"{bucket}/{key}", "rb") as f:
        got = pd.read_parquet(f, columns=["id", "score"])
    expected = pq.read_table(io.BytesIO(files[key]), columns=["id", "score"]).to_pandas()
    pd.testing.assert_frame_equal(got, expected)
    used = fs.stats() - before
    assert used.requests_for("get") >= 1
    assert used.requests_for("get_object") == 0


def test_pyarrow_dataset_over_the_filesystem_matches_local_bytes(
    fs: S3FileSystem, bucket: str, files: dict[str, bytes]
) -> None:
    dataset = ds.dataset(f"{bucket}/table", filesystem=fs, format="parquet")
    assert sorted(dataset.files) == sorted(f"{bucket}/{key}" for key in files)
    got = dataset.to_table().sort_by("id")
    expected = pa.concat_tables([pq.read_table(io.BytesIO(data)) for data in files.values()]).sort_by("id")
    assert got.equals(expected)
    assert fs.stats().requests_for("get") >= len(files)


def test_fsspec_open_reads_the_same_bytes(bucket: str, files: dict[str, bytes], s3_endpoint: Any) -> None:
    key = "table/part-0.parquet"
    with fsspec.open(f"s3io://{bucket}/{key}", "rb", endpoint_url=s3_endpoint.url) as f:
        assert f.read() == files[key]
