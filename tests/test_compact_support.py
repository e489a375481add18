"""Shared helpers of the compaction tests (no tests here): landing zones, readers, listings.

Two readers: ``visible_table`` reads what a journal-aware reader (the s3parquet reader) reads, through
``resolve_visible_files``; ``plain_table`` reads every non-hidden object, as Spark's built-in parquet or pyarrow
would, without the journal.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3io import Policy, S3Client
from s3io.compaction import CompactionOptions, table_checksum
from s3io.table import list_visible
from s3io.table.data_files import is_hidden
from s3io.urls import parse_s3_url

FAST_POLICY = Policy(backoff_base=0.001, backoff_cap=0.05, first_byte_timeout=5.0, stall_timeout=2.0)
TEST_OPTIONS = CompactionOptions(
    grace_period=0.2, lease_ttl=5.0, clock_skew=0.0, max_concurrent_groups=2, owner="test-job"
)
SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("tags", pa.list_(pa.string()))]
)


# A compaction job in a subprocess of its own, so that a crash point's SIGKILL ends it and not the test.
CRASHING_JOB = """
import asyncio, json, sys
from s3io import Policy, S3Client
from s3io.compaction import CompactionOptions, compact_prefix

endpoint, url, crash_at, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

async def main():
    policy = Policy(backoff_base=0.001, backoff_cap=0.05)
    async with S3Client(policy, endpoint_url=endpoint) as client:
        report = await compact_prefix(client, url, CompactionOptions(**options), crash_at=crash_at)
    print(report.status)

asyncio.run(main())
"""


def run_job_until_killed(
    endpoint: str, url: str, crash_at: Any, options: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Run a compaction of ``url`` (CompactionOptions fields in ``options``) that SIGKILLs itself at ``crash_at``
    (a CrashPoint), in a subprocess; its return code is -SIGKILL when the crash point was reached."""
    return run_script([CRASHING_JOB, endpoint, url, crash_at.value, json.dumps(options)])


def run_script(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``python -c <args>`` in a subprocess, its output captured; killed if it outlives ``timeout``."""
    process = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def make_client(endpoint_url: str, policy: Policy = FAST_POLICY) -> S3Client:
    return S3Client(policy, endpoint_url=endpoint_url)


def parquet_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **kwargs)
    return buffer.getvalue()


def rows_table(start: int, count: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name-{i}" if i % 7 else None for i in ids],
            "score": [i * 0.5 for i in ids],
            "tags": [[f"t{i % 3}"] * (i % 3) for i in ids],
        },
        schema=schema,
    )


def write_landing_zone(
    s3: Any, bucket: str, prefix: str, partitions: dict[str, int], rows_per_file: int = 40, start: int = 0
) -> pa.Table:
    """``partitions`` maps a directory (e.g. "date=1") to a number of files; returns every row written."""
    tables = []
    next_id = start
    for directory, files in partitions.items():
        for i in range(files):
            table = rows_table(next_id, rows_per_file)
            next_id += rows_per_file
            key = f"{prefix}{directory}/part-{i:05d}.parquet" if directory else f"{prefix}part-{i:05d}.parquet"
            s3.put_object(Bucket=bucket, Key=key, Body=parquet_bytes(table))
            tables.append(table)
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def all_keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    token = None
    while True:
        kwargs = {"Bucket": bucket, "Prefix": prefix}
        if token:
            kwargs["ContinuationToken"] = token
        page = s3.list_objects_v2(**kwargs)
        keys.extend(o["Key"] for o in page.get("Contents", []))
        token = page.get("NextContinuationToken")
        if not token:
            return sorted(keys)


def control_keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    """The keys s3io's protocol left under ``prefix`` (``_s3io_`` in them), but a table lock its holder released:
    a lock stays once released (marked so), since removing it would need a conditional DELETE."""
    return [k for k in all_keys(s3, bucket, prefix) if "_s3io_" in k and not released_lock(s3, bucket, k)]


def stored_objects(s3: Any, bucket: str, prefix: str = "") -> dict[str, str]:
    """Every object's ETag by key, but a released table lock's (it stays, marked released, and each run that takes
    and releases it rewrites it)."""
    return {
        o["Key"]: o["ETag"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
        if not released_lock(s3, bucket, o["Key"])
    }


def released_lock(s3: Any, bucket: str, key: str) -> bool:
    """Whether ``key`` is a table lock whose body says it was released."""
    if not key.endswith("/LOCK") and key != "LOCK":
        return False
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).get("released") is True


def data_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    return [k for k in all_keys(s3, bucket, prefix) if not is_hidden(k[len(prefix) :])]


def sort_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts, sorted by id: equal lists mean equal multisets of rows."""
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def _read_all(pieces: list[bytes]) -> pa.Table:
    tables = [pq.read_table(pa.BufferReader(p)).cast(SCHEMA) for p in pieces]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def plain_table(s3: Any, bucket: str, prefix: str) -> pa.Table:
    """What a reader that ignores the journal reads: every non-hidden object."""
    return _read_all([s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in data_keys(s3, bucket, prefix)])


async def visible_table(client: S3Client, bucket: str, prefix: str) -> pa.Table:
    """What a journal-aware reader reads: list, resolve against the journal, read each file pinned to its ETag."""
    (listing,) = await list_visible(client, [parse_s3_url(f"s3://{bucket}/{prefix}")])
    files = [f.info for f in listing.files]
    pieces = [(await client.get_object(bucket, f.key, if_match=f.etag)).data for f in files]
    return _read_all(pieces)


def same_rows(table: pa.Table, original: pa.Table) -> bool:
    return table.num_rows == original.num_rows and sort_rows(table) == sort_rows(original)


def checksum_of(table: pa.Table) -> dict[str, str]:
    return table_checksum(table.select(SCHEMA.names).cast(SCHEMA)).digest()


def wait_for(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
