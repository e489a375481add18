"""Shared helpers of the write tests (no tests here): writing tasks, and reading back as each kind of reader would.

``visible_rows`` reads what a journal-aware reader reads (s3io.read_parquet), ``plain_rows`` every non-hidden
object, as pyarrow or Spark's own reader would; ``uploads_left`` lists multipart uploads nobody completed.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from test_compact_support import FAST_POLICY, data_keys, run_script

from s3io import S3Client
from s3io.api import read_parquet_async
from s3io.errors import NotFound
from s3io.write import TaskOutput, TaskWriter, WriteOptions, WriteSpec

TEST_WRITE = WriteOptions(grace_period=0.2, lease_ttl=3.0, clock_skew=0.0, lock_wait=30.0)
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("text", pa.string())])


def rows(start: int, count: int, days: int = 3) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {"id": ids, "day": [f"2024-06-0{1 + i % days}" for i in ids], "text": [f"row {i} " * 8 for i in ids]},
        schema=SCHEMA,
    )


async def run_task(client: S3Client, spec: WriteSpec, table: pa.Table, task: int = 0) -> TaskOutput:
    """One task writing ``table``; its output (uploads left for the commit)."""
    async with TaskWriter(client, spec, task) as writer:
        return await writer.write_all(table.to_batches(max_chunksize=1000))


async def visible_ids(endpoint: str, url: str) -> list[int]:
    """The ids a journal-aware reader reads (sorted; [] when nothing is there)."""
    try:
        table = await read_parquet_async(url, columns=["id"], endpoint_url=endpoint, policy=FAST_POLICY)
    except NotFound:
        return []
    return sorted(table.column("id").to_pylist())


def plain_ids(s3: Any, bucket: str, prefix: str) -> list[int]:
    """The ids a reader that ignores the journal reads: every non-hidden object."""
    ids: list[int] = []
    for key in data_keys(s3, bucket, prefix):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        ids += pq.read_table(pa.BufferReader(body), columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def uploads_left(s3: Any, bucket: str) -> list[str]:
    return sorted(u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def control_keys(s3: Any, bucket: str, prefix: str, folder: str) -> list[str]:
    """Keys under ``<prefix>_s3io_table/<folder>/``."""
    found = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}_s3io_table/{folder}/").get("Contents", [])
    return sorted(o["Key"] for o in found)


# A write whose commit SIGKILLs itself at a crash point, in a subprocess of its own.
CRASHING_WRITE = """
import asyncio, json, sys
import pyarrow as pa
from s3io import Policy
from s3io.store import StoreConfig
from s3io.table import layout
from s3io.write import TaskWriter, WriteOptions, WriteSpec, commit_write

endpoint, url, crash_at, options, ids = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
start, count = (int(x) for x in ids.split(":"))

async def main():
    store = StoreConfig(endpoint=endpoint, policy=Policy(backoff_base=0.001, backoff_cap=0.05))
    bucket, prefix = layout.parse_prefix(url)
    table = pa.table({"id": list(range(start, start + count)),
                      "day": [f"2024-06-0{1 + i % 3}" for i in range(start, start + count)],
                      "text": [f"row {i} " * 8 for i in range(start, start + count)]})
    spec = WriteSpec(bucket, prefix, layout.new_job_id(), table.schema, WriteOptions(**options))
    async with store.client() as client:
        outputs = []
        for task, part in enumerate((table.slice(0, count // 2), table.slice(count // 2))):
            async with TaskWriter(client, spec, task) as writer:
                outputs.append(await writer.write_all(part.to_batches()))
        report = await commit_write(client, spec, outputs, crash_at=crash_at or None)
    print(report.status)

asyncio.run(main())
"""


def run_write_until_killed(
    endpoint: str, url: str, crash_at: str, options: dict[str, Any], ids: tuple[int, int]
) -> subprocess.CompletedProcess[str]:
    """Write rows ``ids`` = (start, count) in two tasks and commit, SIGKILLed at ``crash_at``, in a subprocess."""
    return run_script([CRASHING_WRITE, endpoint, url, crash_at, json.dumps(options), f"{ids[0]}:{ids[1]}"], 120)
