"""The transaction layer on stores without a conditional DELETE (moto staged as Ceph RGW 16 and as LocalStack by
testbed/store_quirks.py): which guard each store's data-file deletes get, an input rewritten after the plan
never deleted, a lock released and taken over by conditional replace only, a claim rolled back without a
conditional DELETE, and ``require_atomic_deletes`` refusing a store whose only guard is a HEAD before the DELETE.
The same on a real Ceph RGW: test_table_real_stores.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from test_compact_support import (
    FAST_POLICY,
    TEST_OPTIONS,
    all_keys,
    control_keys,
    plain_table,
    same_rows,
    stored_objects,
    write_landing_zone,
)
from test_write_support import plain_ids, rows, uploads_left, visible_ids

from s3io import S3Client
from s3io.compaction import ConditionalWritesUnsupported, TableLock, compact_prefix, recover_prefix
from s3io.s3.capabilities import VERDICTS, DeleteGuard
from s3io.table import journal, layout
from s3io.table.journal import PENDING, JournalEntry, ObjectRef
from s3io.write import write_parquet_async
from testbed import store_quirks as quirks
from testbed.moto_server import Middleware
from testbed.store_quirks import store_with

pytestmark = pytest.mark.timeout(120)
PREFIX = "guarded/"

AS_RGW_16 = [quirks.ignores_header("DELETE", "If-Match"), quirks.honours_delete_if_unmodified_since]
AS_LOCALSTACK = [quirks.refuses_header("DELETE", "If-Match")]
STORES = [
    pytest.param([], DeleteGuard.CONDITIONAL_DELETE, id="as-aws"),
    pytest.param(AS_RGW_16, DeleteGuard.UNMODIFIED_SINCE, id="as-rgw-16"),
    pytest.param(AS_LOCALSTACK, DeleteGuard.HEAD_IF_MATCH, id="as-localstack"),
]
OLD_ENOUGH = 2.5  # seconds: past UNMODIFIED_SINCE_MARGIN, so RGW's guard (whole seconds) may plan a file's delete


@pytest.fixture(autouse=True)
def _fresh_verdicts() -> Iterator[None]:
    VERDICTS.forget()  # each staged store listens on a port of its own, but a port can be reused
    yield
    VERDICTS.forget()


def _client(url: str, *, atomic: bool = False) -> S3Client:
    return S3Client(FAST_POLICY, endpoint_url=url, require_atomic_deletes=atomic)


def _store(quirk: list[Middleware]) -> AbstractContextManager[str]:
    return store_with(quirks.honours_bulk_etags, *quirk)


@pytest.mark.parametrize(("quirk", "guard"), STORES)
async def test_compaction_deletes_its_inputs_through_the_best_guard_the_store_honours(
    s3_client: Any, bucket: str, quirk: list[Middleware], guard: DeleteGuard
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    time.sleep(OLD_ENOUGH)
    with _store(quirk) as url:
        async with _client(url) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok" and report.files_after == 1 and not report.conflicts, report.to_text()
    assert report.delete_guard == guard.value and f"inputs deleted through {guard.value}" in report.to_text()
    assert control_keys(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_under_rgws_guard_files_younger_than_its_margin_are_left_for_the_next_run(
    s3_client: Any, bucket: str
) -> None:
    """x-amz-delete-if-unmodified-since has whole seconds: a file written in the second its plan names could be
    rewritten within it unseen, so a file is planned only once it is older than a few seconds on the store's clock."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    with _store(AS_RGW_16) as url:
        async with _client(url) as client:
            young = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
            assert young.status == "nothing_to_do" and young.files_after == 6, young.to_text()
            assert any("6 file(s) left out: written less than 2 s ago" in w for w in young.warnings), young.warnings
            time.sleep(OLD_ENOUGH)
            later = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert later.status == "ok" and later.files_after == 1, later.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


@pytest.mark.parametrize(("quirk", "guard"), STORES)
async def test_an_input_rewritten_after_the_plan_is_never_deleted(
    s3_client: Any, bucket: str, quirk: list[Middleware], guard: DeleteGuard
) -> None:
    """Another writer (outside the journal) rewrites an input while the job waits its grace period after the
    commit: the input's delete is refused by the store's guard (on RGW, 412 from the unmodified-since condition),
    and the new object, with its rows, stays."""
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    time.sleep(OLD_ENOUGH)
    victim = f"{PREFIX}date=1/part-00002.parquet"
    rewritten = s3_client.get_object(Bucket=bucket, Key=f"{PREFIX}date=1/part-00004.parquet")["Body"].read()
    with _store(quirk) as url:
        async with _client(url) as client:
            job = asyncio.create_task(
                compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS.replace(grace_period=3.0))
            )
            deadline = time.monotonic() + 60
            while not _committed_entries(s3_client, bucket) and time.monotonic() < deadline and not job.done():
                await asyncio.sleep(0.05)
            assert _committed_entries(s3_client, bucket), "the job never committed"
            put = await asyncio.to_thread(s3_client.put_object, Bucket=bucket, Key=victim, Body=rewritten)
            report = await job
    assert report.status == "ok" and report.delete_guard == guard.value, report.to_text()
    assert len(report.conflicts) == 1 and victim in report.conflicts[0], report.conflicts
    assert s3_client.head_object(Bucket=bucket, Key=victim)["ETag"] == put["ETag"]  # the new object, kept
    left = sorted(k for k in all_keys(s3_client, bucket, PREFIX) if "/part-0000" in k)
    assert left == [victim]


def _committed_entries(s3: Any, bucket: str) -> list[str]:
    keys = [k for k in all_keys(s3, bucket, layout.journal_prefix(PREFIX)) if layout.is_journal_key(k)]
    return [k for k in keys if json.loads(s3.get_object(Bucket=bucket, Key=k)["Body"].read())["state"] == "committed"]


async def test_a_lock_taken_over_is_never_released_by_its_old_holder_and_a_released_one_is_taken_at_once(
    s3_client: Any, bucket: str
) -> None:
    """On a store that answers DELETE If-Match with 501 (LocalStack): release is a conditional replace with a
    "released" body, so a holder whose lease ended and whose lock another job took cannot undo the new holder's."""
    key = layout.lock_key(PREFIX)
    with _store(AS_LOCALSTACK) as url:
        async with _client(url) as client:
            old = TableLock(client, bucket, PREFIX, owner="old", job_id="a", ttl=0.5, clock_skew=0.0)
            await old.acquire()
            new = TableLock(client, bucket, PREFIX, owner="new", job_id="b", ttl=30.0, clock_skew=0.0)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    await new.acquire()
                    break
                except Exception as exc:  # LockHeld until the old lease ends on the store's clock
                    assert type(exc).__name__ == "LockHeld", exc
                    await asyncio.sleep(0.25)
            assert new.taken_over is not None and new.taken_over.owner == "old"
            await old.release()  # 412: the lock is the new holder's; left to it
            body = json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
            assert body["owner"] == "new" and body["released"] is False
            await new.ensure_held()
            await new.release()
            assert json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())["released"] is True
            started = time.monotonic()
            third = TableLock(client, bucket, PREFIX, owner="third", job_id="c", ttl=30.0, clock_skew=0.0)
            await third.acquire()  # a released lock is taken with If-Match, without waiting for any lease
            assert time.monotonic() - started < 5 and third.taken_over is None
            await third.release()


async def test_a_dead_jobs_claim_is_rolled_back_without_a_conditional_delete(s3_client: Any, bucket: str) -> None:
    """A pending entry and its staging object left by a killed job, recovered on a store that refuses DELETE
    If-Match: the entry is marked aborted (If-Match), then deleted plainly, with its staging object."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 3})
    staging_key = f"{PREFIX}date=1/_s3io_staging/dead/g0-00000000.parquet"
    staging = s3_client.put_object(Bucket=bucket, Key=staging_key, Body=b"an output never committed")
    with _store(AS_LOCALSTACK) as url:
        async with _client(url) as client:
            entry = JournalEntry(
                job_id="dead",
                group_id="g0",
                state=PENDING,
                bucket=bucket,
                prefix=PREFIX,
                partition_dir=f"{PREFIX}date=1/",
                inputs=(),
                staging=ObjectRef(staging_key, staging["ETag"], 25),
                final_key=layout.final_key(f"{PREFIX}date=1/", "dead", "g0"),
            )
            await journal.create(client, entry)
            report = await recover_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok", report.to_text()
    assert report.recovery is not None and report.recovery.rolled_back == [entry.key]
    assert control_keys(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_with_atomic_deletes_required_a_store_without_one_is_refused_by_name_and_nothing_is_written(
    s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = stored_objects(s3_client, bucket)
    with _store(AS_LOCALSTACK) as url:
        async with _client(url, atomic=True) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
        assert report.status == "refused", report.to_text()
        assert "requireAtomicDeletes is set" in report.message
        assert DeleteGuard.HEAD_IF_MATCH.value in report.message and "nothing was compacted" in report.message
        with pytest.raises(ConditionalWritesUnsupported, match="requireAtomicDeletes is set") as refused:
            await write_parquet_async(  # a table of its own: the landing zone's partitioning is not the subject
                rows(0, 100),
                f"s3://{bucket}/fresh/",
                endpoint_url=url,
                policy=FAST_POLICY,
                require_atomic_deletes=True,
            )
        assert "nothing was committed" in str(refused.value)
    assert stored_objects(s3_client, bucket) == before and uploads_left(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_with_atomic_deletes_required_rgws_guard_is_accepted(s3_client: Any, bucket: str) -> None:
    with _store(AS_RGW_16) as url:
        report = await write_parquet_async(
            rows(0, 100), f"s3://{bucket}/{PREFIX}", endpoint_url=url, policy=FAST_POLICY, require_atomic_deletes=True
        )
    assert report.status == "committed" and report.delete_guard == DeleteGuard.UNMODIFIED_SINCE.value


@pytest.mark.parametrize(("quirk", "guard"), STORES)
async def test_an_overwrite_deletes_the_files_it_replaces_through_the_stores_guard(
    s3_client: Any, bucket: str, quirk: list[Middleware], guard: DeleteGuard
) -> None:
    """Under RGW's guard the files an overwrite replaces are planned once old enough: the commit waits for them."""
    url_of = f"s3://{bucket}/{PREFIX}"
    options = {"grace_period": 0.2, "lease_ttl": 5.0, "clock_skew": 0.0, "policy": FAST_POLICY}
    with _store(quirk) as url:
        first = await write_parquet_async(rows(0, 300), url_of, endpoint_url=url, partition_by="day", **options)
        second = await write_parquet_async(rows(1000, 200), url_of, endpoint_url=url, mode="overwrite", **options)
        assert await visible_ids(url, url_of) == list(range(1000, 1200))
    assert first.status == second.status == "committed" and second.replaced == 3, second.summary()
    assert second.delete_guard == guard.value and f"deletes through {guard.value}" in second.summary()
    assert plain_ids(s3_client, bucket, PREFIX) == list(range(1000, 1200))  # the replaced files are deleted
    assert uploads_left(s3_client, bucket) == []
