"""Compaction asks s3io's store probe before anything else: a store that lacks a condition the lock and the journal
need is refused with its behaviour named, before anything is written; a store that honours a condition only in
another form (Ceph RGW 16: If-Match on PUT with the ETag unquoted) gets that form; a missing ETag never becomes an
unconditional request.

The stores are moto behind WSGI middleware (testbed/store_quirks.py) that answer as stores do
that lack one behaviour; they share moto's backend with the ``s3_endpoint`` server, so the landing zone is written
with boto3 there.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from test_compact_support import (
    TEST_OPTIONS,
    all_keys,
    control_keys,
    make_client,
    plain_table,
    released_lock,
    same_rows,
    write_landing_zone,
)

from s3io.compaction import MissingETag, TableLock, compact_prefix, recover_prefix
from s3io.s3.capabilities import VERDICTS
from s3io.table import conditional, layout
from s3io.table.lock import LockInfo
from testbed import store_quirks as quirks
from testbed.moto_server import Middleware
from testbed.store_quirks import lax_conditionals, listings_without_etags, store_with, without_etags

pytestmark = pytest.mark.timeout(120)

PREFIX = "probed/"


@pytest.fixture
def lax_store(s3_endpoint: Any) -> Iterator[str]:
    """The URL of a store that ignores conditional headers on PUT and DELETE (moto's backend, shared)."""
    with store_with(lax_conditionals) as url:
        yield url


def _objects(s3: Any, bucket: str) -> dict[str, str]:
    """Every object but a released lock (it stays, marked released: see s3io.table.lock)."""
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: o["ETag"] for o in listed if not released_lock(s3, bucket, o["Key"])}


async def test_a_store_that_ignores_conditional_writes_is_refused_before_anything_is_written(
    lax_store: str, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = _objects(s3_client, bucket)
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(lax_store) as client:
        report = await compact_prefix(client, url, TEST_OPTIONS)
        assert report.status == "refused", report.to_text()
        message = report.message
        assert f"the store at {lax_store} does not do what the compaction lock and journal need" in message
        assert "conditional create (PUT If-None-Match: *): PUT If-None-Match: * was ignored" in message
        assert "conditional replace (PUT If-Match): PUT If-Match: <another ETag> was ignored" in message
        assert "conditional delete" not in message  # nothing needs it: data files' deletes have a guard of their own
        assert "nothing was compacted and no lock was taken" in message
        assert "Ceph RGW ignores conditional writes in a versioned bucket), put the table in an unversioned" in message
        verdict = VERDICTS.get(lax_store)
        assert verdict is not None and report.requests == 1 + verdict.requests  # the existence LIST, then the probe
        recovery = await recover_prefix(client, url, TEST_OPTIONS)
        assert recovery.status == "refused" and "does not do what the compaction lock" in recovery.message
        assert recovery.requests == 0  # the verdict is kept: the store is not asked again
    assert _objects(s3_client, bucket) == before  # no probe object, no lock, no journal, no output
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


@pytest.mark.parametrize(
    ("quirk", "named"),
    [
        pytest.param(
            quirks.refuses_header("PUT", "If-None-Match"),
            "conditional create (PUT If-None-Match: *): PUT If-None-Match: * answered 501 NotImplemented",
            id="create-not-implemented-as-swift",
        ),
        pytest.param(
            quirks.refuses_every_if_match_put,
            "conditional replace (PUT If-Match): PUT If-Match refused the object's own ETag, quoted and unquoted",
            id="put-if-match-never-holds",
        ),
    ],
)
async def test_a_store_lacking_one_condition_is_refused_naming_only_it_and_nothing_is_written(
    s3_endpoint: Any, s3_client: Any, bucket: str, quirk: Middleware, named: str
) -> None:
    """A store whose PUT If-Match never holds used to pass compaction's own probe (it checked only that wrong ETags
    are refused) and stop later with a lock_lost blaming another job (issue 27): now it is refused up front."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = _objects(s3_client, bucket)
    with store_with(quirks.honours_bulk_etags, quirk) as url:
        async with make_client(url) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "refused", report.to_text()
    assert named in report.message and report.message.count("(PUT If") + report.message.count("(DELETE If") == 1
    assert _objects(s3_client, bucket) == before
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_store_that_takes_put_if_match_only_unquoted_is_compacted_in_that_form(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Ceph RGW 16 answers 412 to PUT If-Match with the object's own ETag quoted, as S3 sends ETags: the lock's
    renewals and the journal's advances are sent unquoted once probed, and every wrong ETag is still refused."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    with store_with(quirks.honours_bulk_etags, quirks.refuses_quoted_if_match) as url:
        async with make_client(url) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS.replace(keep_history=True))
    assert report.status == "ok" and report.files_after == 1 and not report.conflicts, report.to_text()
    assert "PUT If-Match needs the ETag unquoted (sent so)" in report.store and report.retries == 0
    entries = [k for k in all_keys(s3_client, bucket) if layout.is_journal_key(k)]
    assert (
        len(entries) == 1
        and json.loads(s3_client.get_object(Bucket=bucket, Key=entries[0])["Body"].read())["state"] == "done"
    )  # pending -> committed -> published -> done: three conditional replaces, each accepted
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_the_probe_runs_once_per_store_before_the_lock_and_its_verdict_is_reported_and_logged(
    fault_proxy: Any, s3_client: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="s3io")
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(fault_proxy.url) as client:
        first = await compact_prefix(client, url, TEST_OPTIONS)
        more = write_landing_zone(s3_client, bucket, PREFIX, {"date=3": 6}, start=len(original))
        second = await compact_prefix(client, url, TEST_OPTIONS)
    assert first.status == second.status == "ok", first.to_text() + second.to_text()
    verdict = VERDICTS.get(fault_proxy.url)
    assert verdict is not None
    locked = min(r.seq for r in fault_proxy.requests if r.path.endswith("_s3io_table/LOCK"))
    exists, *probe = [r for r in fault_proxy.requests if r.seq < locked]  # the first things the first run did
    assert exists.method == "GET" and "list-type=2" in exists.query  # one LIST: is anything there at all?
    assert len(probe) == verdict.requests
    assert all("_s3io_table/probe/" in r.path or r.query == "delete=" for r in probe), probe
    assert [r for r in fault_proxy.requests if "_s3io_table/probe/" in r.path and r.seq > locked] == []
    assert first.store == second.store == verdict.summary()
    assert verdict.summary() in first.to_text()
    assert [r.getMessage() for r in caplog.records].count(verdict.summary()) == 1
    bulk_deletes = len([r for r in fault_proxy.requests if r.query == "delete=" and r.seq > locked])
    single_deletes = fault_proxy.count(method="DELETE", path=r"/date%3D[123]/part-")
    if "lacks per-object ETags in DeleteObjects" in first.store:  # moto before 5.2.6: a conditional DELETE each
        assert (bulk_deletes, single_deletes) == (0, 18)
    else:  # moto 5.2.6 honours them, as S3 does: one DeleteObjects per partition's entry, no single DELETE
        assert "has every capability" in first.store
        assert (bulk_deletes, single_deletes) == (3, 0)
    assert control_keys(s3_client, bucket) == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), pa.concat_tables([original, more]))


async def test_a_missing_etag_is_refused_and_never_sent_without_its_condition(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    key = f"{PREFIX}_s3io_table/journal/j/g.json"
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"theirs")
    async with make_client(fault_proxy.url) as client:
        for missing in (None, "", '""'):
            with pytest.raises(MissingETag, match=r"no ETag.*nothing was sent"):
                await conditional.put_if_match(client, bucket, key, b"mine", missing)
            with pytest.raises(MissingETag, match=r"no ETag.*nothing was sent"):
                await conditional.delete_if_match(client, bucket, key, missing)
    assert fault_proxy.requests == []
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"


async def test_a_lock_whose_etag_the_store_withholds_is_never_taken_over_unconditionally(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    lock_key = layout.lock_key(PREFIX)
    dead = LockInfo(owner="dead-host:1", ttl=0.0, job_id="D", acquired_at=time.time() - 100).encode()
    s3_client.put_object(Bucket=bucket, Key=lock_key, Body=dead)
    no_lock_etag = without_etags(lambda method, path: method in ("GET", "HEAD") and path.endswith(lock_key))
    with store_with(no_lock_etag) as url:
        async with make_client(url) as client:
            lock = TableLock(client, bucket, PREFIX, owner="me", job_id="J", ttl=5, clock_skew=0)
            with pytest.raises(MissingETag, match="judge the table lock"):
                await lock.acquire()
    assert s3_client.get_object(Bucket=bucket, Key=lock_key)["Body"].read() == dead


async def test_files_listed_without_an_etag_are_never_compacted(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    """Their deletes after the commit could not be conditional: an input replaced meanwhile would be lost."""
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = _objects(s3_client, bucket)
    with store_with(listings_without_etags) as url:
        async with make_client(url) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "nothing_to_do", report.to_text()
    assert len(report.skipped_files) == 6 and all("no ETag" in f.reason for f in report.skipped_files)
    assert _objects(s3_client, bucket) == before
