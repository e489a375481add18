"""A Spark task's read holds what docs/memory.md says it may: the budget (or one row group larger than it, alone)
plus a few decoded batches and the queue to Spark, measured as the resident set of a fresh process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.dataset.parquet_reader import BATCHES_AHEAD, DECODE_AHEAD
from spark_ext.source.partition_read import QUEUED_BATCHES
from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY

MiB = 1024 * 1024
BUDGET = 16 * MiB
RUNTIME = 48 * MiB  # the bound's allowance for the interpreter's and Arrow's allocators and the connections
COLUMNS = [("id", "int64"), ("x", "int64"), ("v", "double"), ("category", "string")]
CHILD = Path(__file__).parent / "support" / "read_rss.py"


def parquet_file(rows: int, seed: int) -> bytes:
    """One row group of ``rows`` rows, ~20 bytes a row in the file, ~37 decoded (random, barely compressible)."""
    rng = np.random.default_rng(seed)
    categories = np.asarray([f"category-{i:02d}" for i in range(16)], dtype=object)
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": rng.integers(0, 2**31, rows, dtype=np.int64),
            "v": rng.random(rows),
            "category": pa.array(categories[rng.integers(0, 16, rows)]),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=rows)
    return sink.getvalue()


def bound(budget: int, largest_row_group: int, batch: int) -> int:
    """docs/memory.md: fetched bytes, decoded batches ahead, the queue to Spark and the batch being sent, runtime."""
    batches = DECODE_AHEAD * (BATCHES_AHEAD + 1) + QUEUED_BATCHES + 1
    return max(budget, largest_row_group) + batches * batch + RUNTIME


def read_in_child(endpoint: str, bucket: str, objects: list[tuple[str, int]]) -> dict[str, Any]:
    args = {
        "endpoint": endpoint,
        "access_key": FAKE_ACCESS_KEY,
        "secret_key": FAKE_SECRET_KEY,
        "bucket": bucket,
        "objects": objects,
        "budget": BUDGET,
        "columns": COLUMNS,
    }
    done = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(args)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(240)
def test_a_task_holds_the_budget_plus_a_few_batches_and_a_row_group_larger_than_it_about_once(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    small = parquet_file(260_000, seed=1)  # ~5 MiB: three in the 16 MiB budget, 12 in the read
    large = parquet_file(2_600_000, seed=2)  # one ~50 MiB row group, 3x the budget: read alone
    objects = []
    for i in range(12):
        s3_client.put_object(Bucket=bucket, Key=f"many/{i:02d}.parquet", Body=small)
        objects.append((f"many/{i:02d}.parquet", len(small)))
    s3_client.put_object(Bucket=bucket, Key="one/large.parquet", Body=large)

    many = read_in_child(s3_endpoint.url, bucket, objects)
    assert many["rows"] == 12 * 260_000
    assert many["peak_held"] <= BUDGET
    assert many["growth"] <= bound(BUDGET, 0, many["largest_batch"]), many

    one = read_in_child(s3_endpoint.url, bucket, [("one/large.parquet", len(large))])
    assert one["rows"] == 2_600_000
    assert one["peak_held"] <= len(large)
    # Decoded whole before its first batch was handed over, a 63 MiB row group held 236 MiB over idle here.
    assert one["growth"] <= bound(BUDGET, len(large), one["largest_batch"]), one
