"""Every reader of a prefix applies the compaction journal: a compaction killed anywhere between the copy of its
output and its last delete leaves each reader with every row exactly once.

40 small files (100 rows each) under one prefix, compacted into one group by a job that SIGKILLs itself at a crash
point (once per point, in a subprocess). Then each reader reads the prefix as a user would: ``s3io.read_parquet``,
``s3io.iter_batches``, their async forms, ``spark.read.format("s3parquet")`` and an availableNow
``spark.readStream.format("s3parquet")``. A reader that opts out of the journal explicitly (``journal=False``,
``.option("ignoreJournal", "true")``) sees what the objects hold: after the publish record, every compacted row twice.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.spark_fixtures import spark_session  # noqa: F401
from test_compact_support import TEST_OPTIONS, plain_table, run_job_until_killed, write_landing_zone
from test_spark_stream import run_available_now, sink_ids, stream_options

import s3io
from s3io import StoreConfig
from s3io.compaction import CrashPoint
from testbed.moto_server import boto3_client, empty_and_delete_bucket, unique_bucket_name

pytestmark = pytest.mark.timeout(300)

FILES, ROWS = 40, 100
# Each point between the first output's copy to its final key and the last delete of the group's objects.
CRASHES = (
    CrashPoint.AFTER_COPY,
    CrashPoint.AFTER_PUBLISH_RECORD,
    CrashPoint.AFTER_INPUT_DELETE,
    CrashPoint.AFTER_INPUTS_DELETED,
    CrashPoint.AFTER_STAGING_DELETE,
)
JOB_OPTIONS = {
    "grace_period": TEST_OPTIONS.grace_period,
    "lease_ttl": 60.0,  # the dead job's lock outlives the module: nothing recovers the prefix meanwhile
    "clock_skew": 0.0,
    "max_concurrent_groups": 1,
    "owner": "doomed",
}


@dataclass(frozen=True)
class Crashed:
    """A prefix whose compaction died at ``point``, and the rows its files held before."""

    point: CrashPoint
    endpoint: str
    bucket: str
    prefix: str
    ids: Counter[int]

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@pytest.fixture(scope="module")
def lake(s3_endpoint: Any) -> Iterator[str]:
    """One bucket for the module: each crash point compacts a prefix of its own."""
    client = boto3_client(s3_endpoint.url)
    name = unique_bucket_name()
    client.create_bucket(Bucket=name)
    try:
        yield name
    finally:
        empty_and_delete_bucket(client, name)


@pytest.fixture(scope="module", params=CRASHES, ids=[p.value for p in CRASHES])
def crashed(request: pytest.FixtureRequest, s3_endpoint: Any, lake: str) -> Crashed:
    point: CrashPoint = request.param
    prefix = f"{point.value}/events/"
    written = write_landing_zone(boto3_client(s3_endpoint.url), lake, prefix, {"": FILES}, rows_per_file=ROWS)
    result = run_job_until_killed(s3_endpoint.url, f"s3://{lake}/{prefix}", point, JOB_OPTIONS)
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stdout, result.stderr[-2000:])
    return Crashed(point, s3_endpoint.url, lake, prefix, Counter(written.column("id").to_pylist()))


def _ids(table: pa.Table | list[pa.RecordBatch]) -> Counter[int]:
    batches = table if isinstance(table, list) else table.to_batches()
    return Counter(i for batch in batches for i in batch.column("id").to_pylist())


def test_read_parquet_reads_every_row_once(crashed: Crashed) -> None:
    table = s3io.read_parquet(crashed.url, columns=["id"], endpoint_url=crashed.endpoint)
    assert _ids(table) == crashed.ids


def test_iter_batches_reads_every_row_once(crashed: Crashed) -> None:
    batches = list(s3io.iter_batches(crashed.url, columns=["id"], endpoint_url=crashed.endpoint))
    assert _ids(batches) == crashed.ids


async def test_read_parquet_async_reads_every_row_once(crashed: Crashed) -> None:
    table = await s3io.read_parquet_async(crashed.url, columns=["id"], store=StoreConfig(endpoint=crashed.endpoint))
    assert _ids(table) == crashed.ids


async def test_iter_batches_async_reads_every_row_once(crashed: Crashed) -> None:
    stream = s3io.iter_batches_async(crashed.url, columns=["id"], endpoint_url=crashed.endpoint)
    assert _ids([batch async for batch in stream]) == crashed.ids


def test_spark_batch_source_reads_every_row_once(crashed: Crashed, spark: Any) -> None:
    df = spark.read.format("s3parquet").option("endpoint", crashed.endpoint).load(crashed.url)
    assert Counter(row.id for row in df.select("id").collect()) == crashed.ids


@pytest.mark.parametrize("root", ["table", "partition"])
def test_a_filtered_spark_read_reads_every_matching_row_once(
    root: str, spark: Any, s3_endpoint: Any, lake: str
) -> None:
    """The filter option lists only the partition directories it matches, between the same two journal reads as an
    unfiltered read: a compaction of the table, or of one partition (its journal then found in the partition's own
    listing), killed after its publish record (each compacted row stored twice) leaves each matching row once."""
    s3 = boto3_client(s3_endpoint.url)
    prefix = f"filtered-{root}/events/"
    write_landing_zone(s3, lake, prefix, {"day=1": 6, "day=2": 6}, rows_per_file=ROWS)
    target = prefix if root == "table" else f"{prefix}day=2/"
    result = run_job_until_killed(
        s3_endpoint.url, f"s3://{lake}/{target}", CrashPoint.AFTER_PUBLISH_RECORD, JOB_OPTIONS
    )
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stdout, result.stderr[-2000:])
    stored = {day: Counter(plain_table(s3, lake, f"{prefix}day={day}/").column("id").to_pylist()) for day in (1, 2)}
    twice = max(day for day, ids in stored.items() if max(ids.values()) == 2)  # a day the crash left doubled
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).option("filter", f"day = {twice}")
    got = Counter(row.id for row in df.load(f"s3://{lake}/{prefix}").select("id").collect())
    assert got == Counter(set(stored[twice]))


def test_spark_stream_reads_every_row_once(crashed: Crashed, spark: Any, tmp_path: Path) -> None:
    options = stream_options(crashed.endpoint, f"after-{crashed.point.value}".replace("_", "-"))
    query = run_available_now(spark, crashed.url, options, tmp_path / "sink", tmp_path / "checkpoint")
    assert query.exception() is None
    assert Counter(sink_ids(spark, tmp_path / "sink")) == crashed.ids


def test_a_reader_that_opts_out_of_the_journal_reads_every_data_object_as_it_is(crashed: Crashed, spark: Any) -> None:
    """Opting out is explicit, in both APIs, and gives what a reader without the journal (pyarrow, Spark's own
    parquet) reads. The issue's measurement: after the publish record that is every compacted row twice."""
    objects = Counter(
        plain_table(boto3_client(crashed.endpoint), crashed.bucket, crashed.prefix).column("id").to_pylist()
    )
    if crashed.point is CrashPoint.AFTER_PUBLISH_RECORD:
        assert objects == Counter({i: 2 * n for i, n in crashed.ids.items()})
    table = s3io.read_parquet(crashed.url, columns=["id"], endpoint_url=crashed.endpoint, journal=False)
    assert _ids(table) == objects
    df = (
        spark.read.format("s3parquet")
        .option("endpoint", crashed.endpoint)
        .option("ignoreJournal", "true")
        .load(crashed.url)
    )
    assert Counter(row.id for row in df.select("id").collect()) == objects
