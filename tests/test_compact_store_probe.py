"""A store that ignores conditional writes is refused; a missing ETag never becomes an unconditional request.

The lax store is moto behind a WSGI middleware that drops If-Match / If-None-Match from PUT and DELETE before moto
sees them (tests/support/moto_wsgi.py), as many S3-compatible stores do: every conditional write there is a plain
one. It shares moto's backend with the ``s3_endpoint`` server, so the landing zone is written with boto3 there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.moto_wsgi import MotoWsgiServer, lax_conditionals, listings_without_etags, without_etags
from test_compact_support import TEST_OPTIONS, all_keys, make_client, plain_table, same_rows, write_landing_zone

from s3io.compaction import CompactionLock, MissingETag, compact_prefix, recover_prefix
from s3io.table import conditional, layout

pytestmark = pytest.mark.timeout(120)

PREFIX = "probed/"


@pytest.fixture
def lax_store(s3_endpoint: Any) -> Iterator[str]:
    """The URL of a store that ignores conditional headers on PUT and DELETE (moto's backend, shared)."""
    with MotoWsgiServer(lax_conditionals) as url:
        yield url


def _objects(s3: Any, bucket: str) -> dict[str, str]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: o["ETag"] for o in listed}


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
        assert "does not enforce conditional requests" in message
        assert "If-None-Match: * on PUT was ignored" in message
        assert "If-Match on PUT was ignored" in message and "If-Match on DELETE was ignored" in message
        assert "nothing was compacted and no lock was taken" in message and "Use a store that enforces" in message
        assert report.requests <= 8  # the probe (six requests, two more if its object was gone) and nothing else
        recovery = await recover_prefix(client, url, TEST_OPTIONS)
        assert recovery.status == "refused" and "does not enforce conditional requests" in recovery.message
    assert _objects(s3_client, bucket) == before  # no probe object, no lock, no journal, no output
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_the_probe_costs_six_requests_per_run_and_leaves_nothing(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    async with make_client(fault_proxy.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok", report.to_text()
    probe = [r for r in fault_proxy.requests if "_s3io_compaction/probe/" in r.path and "-bulk-delete" not in r.path]
    assert [r.method for r in probe] == ["PUT", "PUT", "PUT", "DELETE", "HEAD", "DELETE"]
    assert [r.status for r in probe] == [200, 412, 412, 412, 200, 204]
    # before the input deletes, a second probe (PUT, DeleteObjects naming another ETag, DELETE): moto ignores the
    # per-object ETag, so the inputs are deleted one conditional DELETE each
    bulk = [r for r in fault_proxy.requests if r.path.endswith("-bulk-delete")]
    assert [r.method for r in bulk] == ["PUT", "DELETE"]
    assert fault_proxy.count(method="POST", path=r"\?delete") == 1
    assert fault_proxy.count(method="DELETE", path=r"/date%3D1/part-") == 6
    assert probe[0].seq < min(r.seq for r in fault_proxy.requests if r.path.endswith("_s3io_compaction/LOCK"))
    assert [k for k in all_keys(s3_client, bucket) if "_s3io_" in k] == []
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_missing_etag_is_refused_and_never_sent_without_its_condition(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    key = f"{PREFIX}_s3io_compaction/journal/j/g.json"
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
    dead = {"owner": "dead-host:1", "job_id": "D", "acquired_at": time.time() - 100, "expires_at": time.time() - 50}
    s3_client.put_object(Bucket=bucket, Key=lock_key, Body=json.dumps(dead).encode())
    no_lock_etag = without_etags(lambda method, path: method in ("GET", "HEAD") and path.endswith(lock_key))
    with MotoWsgiServer(no_lock_etag) as url:
        async with make_client(url) as client:
            lock = CompactionLock(client, bucket, PREFIX, owner="me", job_id="J", ttl=5, clock_skew=0)
            with pytest.raises(MissingETag, match="judge the lock"):
                await lock.acquire()
    assert json.loads(s3_client.get_object(Bucket=bucket, Key=lock_key)["Body"].read()) == dead


async def test_files_listed_without_an_etag_are_never_compacted(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    """Their deletes after the commit could not be conditional: an input replaced meanwhile would be lost."""
    write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    before = _objects(s3_client, bucket)
    with MotoWsgiServer(listings_without_etags) as url:
        async with make_client(url) as client:
            report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "nothing_to_do", report.to_text()
    assert len(report.skipped_files) == 6 and all("no ETag" in f.reason for f in report.skipped_files)
    assert _objects(s3_client, bucket) == before
