"""The transaction layer on real stores without a conditional DELETE: Ceph RGW 16 (testbed/rgw.py, one per
session), which guards a data file's delete by its own ``x-amz-delete-if-unmodified-since``. On it: ``df.write``
append and overwrite, ``s3io.write_parquet``, a ``writeStream`` sink and compaction commit every row exactly once; a
compaction SIGKILLed at each step of its protocol and recovered leaves every row once; an input rewritten by another
writer after the plan is never deleted (412 from the unmodified-since guard); a versioned bucket, where RGW ignores
conditions, is refused by name with the fix. Each test takes the store from the ``store`` parameter, so another
store's fixture shaped like ``rgw`` (an ``endpoint``) runs the same bodies once added to ``STORES`` with its guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from support.spark_fixtures import spark_session  # noqa: F401  (`spark`)
from test_compact_support import (
    FAST_POLICY,
    TEST_OPTIONS,
    all_keys,
    checksum_of,
    control_keys,
    data_keys,
    make_client,
    plain_table,
    run_job_until_killed,
    same_rows,
    visible_table,
    write_landing_zone,
)
from test_write_support import plain_ids, rows, uploads_left, visible_ids

import s3io
from s3io.compaction import ConditionalWritesUnsupported, compact_prefix, recover_prefix
from s3io.s3.capabilities import VERDICTS, DeleteGuard
from s3io.table import layout
from s3io.table.crash import COMPACTION_POINTS
from testbed.moto_server import S3Endpoint, boto3_client, unique_bucket_name

pytestmark = pytest.mark.timeout(600)

# The stores, and the guard of a data file's delete each gets (measured: docs/stores.md).
GUARDS = {"rgw": DeleteGuard.UNMODIFIED_SINCE, "localstack": DeleteGuard.HEAD_IF_MATCH}
STORES = tuple(GUARDS)
VERSIONING_BREAKS_CONDITIONS = {"rgw"}  # measured: a second If-None-Match PUT overwrites in a versioned RGW bucket
OLD_ENOUGH = 2.5  # seconds: past UNMODIFIED_SINCE_MARGIN, so RGW's whole-second guard may plan a file's delete
WRITE_OPTIONS = {"grace_period": 0.2, "lease_ttl": 10.0, "clock_skew": 0.0, "policy": FAST_POLICY}


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def s3_endpoint(store: str, request: pytest.FixtureRequest) -> S3Endpoint:
    """The store under test (overrides the conftest's moto fixture: ``bucket`` and ``s3_client`` follow it)."""
    endpoint: S3Endpoint = request.getfixturevalue(store).endpoint
    return endpoint


@pytest.fixture(autouse=True)
def _fresh_verdicts() -> Iterator[None]:
    VERDICTS.forget()
    yield
    VERDICTS.forget()


def test_write_parquet_appends_and_overwrites_exactly_through_the_stores_guard(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str
) -> None:
    url = f"s3://{bucket}/written/"
    first = s3io.write_parquet(rows(0, 300), url, endpoint_url=s3_endpoint.url, partition_by="day", **WRITE_OPTIONS)
    second = s3io.write_parquet(rows(300, 300), url, endpoint_url=s3_endpoint.url, partition_by="day", **WRITE_OPTIONS)
    assert plain_ids(s3_client, bucket, "written/") == list(range(600))
    overwrite = s3io.write_parquet(
        rows(1000, 90), url, endpoint_url=s3_endpoint.url, partition_by="day", mode="overwrite", **WRITE_OPTIONS
    )
    assert first.status == second.status == overwrite.status == "committed", overwrite.summary()
    assert overwrite.replaced == 6 and overwrite.delete_guard == GUARDS[store].value, overwrite.summary()
    assert plain_ids(s3_client, bucket, "written/") == list(range(1000, 1090))  # the replaced files are deleted
    assert asyncio.run(visible_ids(s3_endpoint.url, url)) == list(range(1000, 1090))
    assert uploads_left(s3_client, bucket) == []


def test_compaction_commits_every_row_once_and_names_the_guard(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, "lake/", {"date=1": 5, "date=2": 5})
    time.sleep(OLD_ENOUGH)

    async def main() -> Any:
        async with make_client(s3_endpoint.url) as client:
            return await compact_prefix(client, f"s3://{bucket}/lake/", TEST_OPTIONS)

    report = asyncio.run(main())
    assert report.status == "ok" and report.files_after == 2 and not report.conflicts, report.to_text()
    assert report.delete_guard == GUARDS[store].value
    assert len(data_keys(s3_client, bucket, "lake/")) == 2 and control_keys(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, "lake/"), original)


def test_an_input_rewritten_after_the_plan_is_never_deleted(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str
) -> None:
    """Another writer rewrites an input while the job waits its grace period after the commit: the store refuses
    the input's delete (on RGW, 412 from x-amz-delete-if-unmodified-since), the rewritten object and its rows stay."""
    write_landing_zone(s3_client, bucket, "lake/", {"date=1": 6})
    time.sleep(OLD_ENOUGH)
    victim = "lake/date=1/part-00002.parquet"
    rewritten = s3_client.get_object(Bucket=bucket, Key="lake/date=1/part-00004.parquet")["Body"].read()

    async def main() -> tuple[Any, str]:
        async with make_client(s3_endpoint.url) as client:
            job = asyncio.create_task(
                compact_prefix(client, f"s3://{bucket}/lake/", TEST_OPTIONS.replace(grace_period=3.0))
            )
            deadline = time.monotonic() + 120
            while not _committed(s3_client, bucket, "lake/") and time.monotonic() < deadline and not job.done():
                await asyncio.sleep(0.05)
            assert _committed(s3_client, bucket, "lake/"), "the job never committed"
            put = await asyncio.to_thread(s3_client.put_object, Bucket=bucket, Key=victim, Body=rewritten)
            return await job, put["ETag"]

    report, etag = asyncio.run(main())
    assert report.status == "ok" and report.delete_guard == GUARDS[store].value, report.to_text()
    assert len(report.conflicts) == 1 and victim in report.conflicts[0], report.conflicts
    assert s3_client.head_object(Bucket=bucket, Key=victim)["ETag"] == etag
    assert sorted(k for k in all_keys(s3_client, bucket, "lake/") if "/part-0000" in k) == [victim]


def _committed(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys = [k for k in all_keys(s3, bucket, layout.journal_prefix(prefix)) if layout.is_journal_key(k)]
    return [k for k in keys if json.loads(s3.get_object(Bucket=bucket, Key=k)["Body"].read())["state"] == "committed"]


CRASH_OPTIONS = {"grace_period": 0.2, "lease_ttl": 2.5, "clock_skew": 0.0, "max_concurrent_groups": 1}


@pytest.mark.timeout(900)
def test_a_compaction_killed_at_each_step_and_recovered_leaves_every_row_once(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str
) -> None:
    """One prefix per crash point, every job killed first (each SIGKILLs itself at its point, in a subprocess),
    then each prefix recovered once its dead job's lock expired: every reader sees every row once."""
    originals = {
        point: write_landing_zone(s3_client, bucket, f"crash-{i}/", {"date=1": 5, "date=2": 5}, rows_per_file=20)
        for i, point in enumerate(COMPACTION_POINTS)
    }
    time.sleep(OLD_ENOUGH)
    for i, point in enumerate(COMPACTION_POINTS):
        killed = run_job_until_killed(s3_endpoint.url, f"s3://{bucket}/crash-{i}/", point, CRASH_OPTIONS)
        assert killed.returncode == -signal.SIGKILL, (point, killed.returncode, killed.stderr[-2000:])

    async def recover_all() -> None:
        async with make_client(s3_endpoint.url, FAST_POLICY) as client:
            for i, point in enumerate(COMPACTION_POINTS):
                url = f"s3://{bucket}/crash-{i}/"
                assert checksum_of(await visible_table(client, bucket, f"crash-{i}/")) == checksum_of(originals[point])
                for _ in range(100):
                    report = await recover_prefix(client, url, TEST_OPTIONS.replace(owner="rescuer"))
                    if report.status != "locked":
                        break
                    await asyncio.sleep(0.2)
                assert report.status == "ok" and not report.conflicts, (point, report.to_text())
                for table in (
                    await visible_table(client, bucket, f"crash-{i}/"),
                    plain_table(s3_client, bucket, f"crash-{i}/"),
                ):
                    assert same_rows(table, originals[point]), point
                assert control_keys(s3_client, bucket, f"crash-{i}/") == [], point

    asyncio.run(recover_all())


def test_a_versioned_bucket_is_refused_by_name_with_the_fix_and_reads_work(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any
) -> None:
    """Ceph RGW ignores conditional writes in a bucket with versioning enabled (a second If-None-Match PUT
    overwrites): the probe asks in the bucket being written, so the write is refused there, naming the fix."""
    name = unique_bucket_name("s3io-versioned")
    s3_client.create_bucket(Bucket=name)
    try:
        s3_client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        original = write_landing_zone(s3_client, name, "lake/", {"date=1": 2})
        if store not in VERSIONING_BREAKS_CONDITIONS:  # the probe asks in this bucket: conditions hold, it writes
            report = s3io.write_parquet(
                rows(0, 10), f"s3://{name}/fresh/", endpoint_url=s3_endpoint.url, **WRITE_OPTIONS
            )
            assert report.status == "committed"
            return
        with pytest.raises(ConditionalWritesUnsupported) as refused:
            s3io.write_parquet(rows(0, 10), f"s3://{name}/fresh/", endpoint_url=s3_endpoint.url, **WRITE_OPTIONS)
        message = str(refused.value)
        assert "PUT If-None-Match: * was ignored (an existing object was overwritten)" in message
        assert "put the table in an unversioned bucket" in message and "nothing was committed" in message
        back = s3io.read_parquet(f"s3://{name}/lake/", endpoint_url=s3_endpoint.url)
        assert same_rows(back, original)
    finally:
        _delete_versioned(s3_endpoint.url, name)


def _delete_versioned(endpoint: str, name: str) -> None:
    client = boto3_client(endpoint)
    for page in client.get_paginator("list_object_versions").paginate(Bucket=name):
        for item in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            client.delete_object(Bucket=name, Key=item["Key"], VersionId=item["VersionId"])
    for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
        client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    client.delete_bucket(Bucket=name)


def test_spark_append_overwrite_and_a_stream_sink_write_every_row_once(
    spark: Any, store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    options = {"endpoint": s3_endpoint.url, "gracePeriod": "0.2s", "clockSkew": "0s", "partitionBy": "day"}
    url = f"s3://{bucket}/spark/"

    def save(df: Any, mode: str) -> None:
        writer = df.write.format("s3parquet").mode(mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save(url)

    save(spark.sql("select id, concat('d', id % 2) day from range(100)"), "append")
    save(spark.sql("select id + 100 as id, concat('d', id % 2) day from range(100)"), "append")
    assert plain_ids(s3_client, bucket, "spark/") == list(range(200))
    save(spark.sql("select id + 1000 as id, 'd0' as day from range(10)"), "overwrite")
    assert plain_ids(s3_client, bucket, "spark/") == list(range(1000, 1010))

    source = tmp_path / "source"
    for n in range(2):
        spark.range(n * 10, n * 10 + 10).coalesce(1).write.mode("append").parquet(str(source))
    query = (
        spark.readStream.schema("id long")
        .parquet(str(source))
        .writeStream.format("s3parquet")
        .option("endpoint", s3_endpoint.url)
        .option("gracePeriod", "0.2s")
        .option("clockSkew", "0s")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(f"s3://{bucket}/sink/")
    )
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert plain_ids(s3_client, bucket, "sink/") == list(range(20))
    assert uploads_left(s3_client, bucket) == []
    read = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert sorted(r.id for r in read.collect()) == list(range(1000, 1010))


def test_with_atomic_deletes_required_a_store_without_an_atomic_guard_is_refused_and_nothing_is_written(
    store: str, s3_endpoint: S3Endpoint, s3_client: Any, bucket: str
) -> None:
    """``require_atomic_deletes``: RGW (x-amz-delete-if-unmodified-since) writes; a store whose only guard is a HEAD
    before the DELETE (LocalStack) is refused by name, with no object and no upload left."""
    url = f"s3://{bucket}/strict/"
    options = {**WRITE_OPTIONS, "require_atomic_deletes": True}
    if GUARDS[store].atomic:
        report = s3io.write_parquet(rows(0, 50), url, endpoint_url=s3_endpoint.url, **options)
        assert report.status == "committed" and report.delete_guard == GUARDS[store].value
        return
    with pytest.raises(ConditionalWritesUnsupported, match="requireAtomicDeletes is set") as refused:
        s3io.write_parquet(rows(0, 50), url, endpoint_url=s3_endpoint.url, **options)
    assert GUARDS[store].value in str(refused.value) and "nothing was committed" in str(refused.value)
    assert s3_client.list_objects_v2(Bucket=bucket, Prefix="strict/").get("KeyCount") == 0
    assert uploads_left(s3_client, bucket) == []


def test_uploads_under_a_hive_directory_are_listed_by_their_own_keys_and_aborted(
    s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """ListMultipartUploads: asked with encoding-type=url, Ceph RGW 16 answered ``day%3D2024-01-01/...`` without
    saying the keys were encoded, so a write's and a compaction's stray uploads under a Hive directory were never
    aborted there (and a listing of a prefix holding ``=`` ended in "a key outside the prefix")."""
    from s3io.s3.client import S3Client
    from s3io.table.write_names import data_file_name
    from s3io.table.write_protocol import abort_job_strays

    prefix = "t/day=2024-01-01/"
    keys = sorted([f"{prefix}{data_file_name('job-1', task, 0)}" for task in range(2)] + [f"{prefix}a b+c%.parquet"])
    for key in keys:
        s3_client.create_multipart_upload(Bucket=bucket, Key=key)

    async def main() -> tuple[list[str], list[str]]:
        async with S3Client(FAST_POLICY, endpoint_url=s3_endpoint.url) as client:
            listed = sorted([u.key async for u in client.list_multipart_uploads(bucket, prefix, page_size=2)])
            aborted = await abort_job_strays(client, bucket, prefix, "job-1")
            return listed, sorted(aborted)

    listed, aborted = asyncio.run(main())
    assert listed == keys
    assert aborted == [key for key in keys if "job-1" in key]
    assert uploads_left(s3_client, bucket) == [f"{prefix}a b+c%.parquet"]
