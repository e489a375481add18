"""Each script in examples/ runs as a subprocess against moto (AWS_ENDPOINT_URL) and prints what it read."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FILES, ROWS = 6, 50


@pytest.fixture
def dataset(bucket: str, s3_client: Any) -> str:
    for i in range(FILES):
        table = pa.table({"id": pa.array(range(ROWS * i, ROWS * (i + 1)), pa.int64()), "name": [f"n{i}"] * ROWS})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        s3_client.put_object(Bucket=bucket, Key=f"ex/part-{i}.parquet", Body=sink.getvalue())
    s3_client.put_object(Bucket=bucket, Key="ex/_SUCCESS", Body=b"")
    return f"s3://{bucket}/ex/"


def run_example(name: str, *args: str, endpoint: str) -> str:
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "S3IO_MAX_ATTEMPTS": "3"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(90)
def test_read_parquet_example(s3_endpoint: Any, dataset: str) -> None:
    out = run_example("read_parquet.py", dataset, endpoint=s3_endpoint.url)
    assert f"read {FILES * ROWS} rows x 2 columns" in out and "id: int64" in out


@pytest.mark.timeout(90)
def test_iter_batches_example_streams_and_stops_early(s3_endpoint: Any, dataset: str) -> None:
    out = run_example("iter_batches.py", dataset, endpoint=s3_endpoint.url)
    assert f"{FILES} batches, {FILES * ROWS} rows, sum(id)={sum(range(FILES * ROWS))}" in out
    out = run_example("iter_batches.py", dataset, "120", endpoint=s3_endpoint.url)
    assert "stopping early after 150 rows" in out and "3 batches, 150 rows" in out


@pytest.mark.timeout(90)
def test_async_read_example(s3_endpoint: Any, dataset: str) -> None:
    glob = dataset + "part-[0-2].parquet"
    out = run_example("async_read.py", dataset, glob, endpoint=s3_endpoint.url)
    assert f"{dataset}: {FILES * ROWS} rows x 2 columns (streamed: {FILES * ROWS} rows)" in out
    assert f"{glob}: {3 * ROWS} rows x 2 columns (streamed: {3 * ROWS} rows)" in out


@pytest.mark.timeout(90)
def test_filters_and_columns_example(s3_endpoint: Any, dataset: str) -> None:
    args = ["--columns", "name", "--where", "id >= 100", "--where", "id < 130"]
    out = run_example("filters_and_columns.py", dataset, *args, endpoint=s3_endpoint.url)
    assert "30 rows; columns: name" in out and "n2" in out
