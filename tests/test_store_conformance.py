"""One suite, every store: the probe's verdict, conditional writes, ranges, ETag pins, multipart uploads, compaction's
refusal and the stream's lease, run on moto (the session's strict server), on a real Ceph RGW (testbed/rgw.py),
s3rver (testbed/s3rver.py), LocalStack's S3 (testbed/localstack.py) and OpenStack Swift's s3api
(testbed/swift.py), each skipped, with the reason, where it cannot run. Where a store cannot do something,
the test says what it does instead (``MEASURED``, ``COMPACTION``): the per-store expectations are the compatibility
table of docs/stores.md. Where a peer does the job (boto3, pyarrow, Spark's reads) it is the oracle.

Every store's S3 user signs with the session's fake keys, so a test body written for moto runs here unchanged: this
module's ``s3_endpoint`` is parametrised by store, and the conftest's ``bucket``, ``s3_client`` and ``fault_proxy``
(and the reused modules' ``fs`` and ``obj``) follow it. Test bodies reused from their home modules (read paths,
fsspec, the engine, the CLI, the Spark batch source and stream) are listed at the end: they run here on RGW,
LocalStack and Swift (the CLI's and Spark's on RGW only, for time), as their home module runs them on moto.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import test_api_read
import test_cli
import test_engine_s3
import test_fs_filesystem
import test_spark_source
import test_spark_stream
from botocore.exceptions import ClientError
from support.spark_fixtures import spark_session  # noqa: F401
from test_compact_support import data_keys, make_client, plain_table, same_rows, write_landing_zone

import s3io
from s3io import Policy
from s3io.compaction import CompactionOptions, ConditionalWritesUnsupported, compact_prefix
from s3io.errors import ObjectChanged, PreconditionFailed, ProtocolError, RequestError, ServerError
from s3io.s3.capabilities import VERDICTS, Capability, EtagForm, MissingCapability, endpoint_key
from s3io.s3.checksum_refusals import REFUSALS, Feature
from s3io.s3.client import S3Client
from s3io.s3.get_range import GetRange
from s3io.s3.multipart_uploads import COMPLETE_MULTIPART_HEAD
from s3io.s3.probe import probe_store, store_capabilities
from s3io.stream_state.lease import Lease, StreamLease
from testbed.moto_server import MotoServer, S3Endpoint

pytestmark = pytest.mark.timeout(300)

STORES = ("moto", "rgw", "s3rver", "localstack", "swift")
REUSED_STORES = ("rgw", "localstack", "swift")  # where the reused read bodies run
RGW_ONLY = ("test_spark", "test_cli")  # reused bodies run on RGW only, for time: a Spark query, a CLI subprocess
POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.2)
SCRATCH = "tmp/_s3io_probe/"
CONDITIONS = (Capability.CONDITIONAL_CREATE, Capability.CONDITIONAL_REPLACE, Capability.CONDITIONAL_DELETE)
CHECKSUMS = (Capability.UPLOAD_CHECKSUMS, Capability.FULL_OBJECT_MULTIPART)
# What each store lacks, and the If-Match form it takes: measured (moto 5.2.6, pinned in pyproject.toml; Ceph RGW
# 16.2.15, Debian bookworm; s3rver 3.7.1, Node 20; LocalStack 2026.3.0, host mode; Swift 2.30.1 s3api, Debian bookworm).
MEASURED = {
    "moto": ((), EtagForm.QUOTED),  # 5.2.5 lacked per-object ETags in DeleteObjects
    "rgw": (
        (Capability.CONDITIONAL_DELETE, Capability.BULK_CONDITIONAL_DELETE, Capability.MULTIPART_ETAG, *CHECKSUMS),
        EtagForm.BARE,
    ),
    "s3rver": (
        (
            *CONDITIONS,
            Capability.DELETE_IF_UNMODIFIED_SINCE,
            Capability.BULK_CONDITIONAL_DELETE,
            Capability.RANGES,
            *CHECKSUMS,
        ),
        EtagForm.QUOTED,
    ),
    "localstack": (
        (Capability.CONDITIONAL_DELETE, Capability.DELETE_IF_UNMODIFIED_SINCE, Capability.BULK_CONDITIONAL_DELETE),
        EtagForm.QUOTED,
    ),
    # Swift's DELETE If-Match passes the probe through a HEAD its proxy makes first (not atomic); moot while it has
    # no conditional create, which refuses writes and compaction there before any delete is planned.
    "swift": (
        (Capability.CONDITIONAL_CREATE, Capability.CONDITIONAL_REPLACE, Capability.BULK_CONDITIONAL_DELETE, *CHECKSUMS),
        EtagForm.QUOTED,
    ),
}
# Why compaction and the writer refuse each store (None: they run there), as the message names it. RGW 16 lacks a
# conditional DELETE, which nothing needs: its data-file deletes go through x-amz-delete-if-unmodified-since.
COMPACTION = {
    "moto": None,
    "rgw": None,
    "s3rver": "conditional create (PUT If-None-Match: *): PUT If-None-Match: * was ignored",
    "localstack": None,
    "swift": "conditional create (PUT If-None-Match: *): PUT If-None-Match: * answered 501 NotImplemented",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test here runs on every store, except a reused body's moto run, which its home module already has."""
    if "store" in metafunc.fixturenames:
        home = metafunc.function.__module__
        stores = STORES if home == __name__ else ("rgw",) if home.startswith(RGW_ONLY) else REUSED_STORES
        metafunc.parametrize("store", stores, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def s3_endpoint(store: str, moto_server: MotoServer, request: pytest.FixtureRequest) -> S3Endpoint:
    """The store under test (overrides the conftest's moto-only fixture for this module)."""
    return moto_server.endpoint if store == "moto" else request.getfixturevalue(store).endpoint


@pytest.fixture(autouse=True, scope="module")
def _verdicts_stay_in_this_module() -> Iterator[None]:
    yield
    VERDICTS.forget()


def _run(work: Any) -> Any:
    return asyncio.run(work)


# --------------------------------------------------------------------------------------------- the probe


def test_the_probe_verdict_is_what_was_measured(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    async def main() -> Any:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            return await probe_store(client, bucket, SCRATCH)

    verdict = _run(main())
    missing, form = MEASURED[store]
    assert verdict.missing == missing, verdict.summary()
    assert verdict.if_match_form is form
    assert verdict.clock is not None and verdict.clock_offset is not None and abs(verdict.clock_offset) <= 2
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # the probe cleaned up


def test_conditional_writes_work_in_the_store_s_form_and_wrong_etags_are_refused(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """Where the store lacks them (s3rver), what it does instead is pinned: the writes land, conditions or not
    (which is why compaction and the stream refuse it, below)."""
    VERDICTS.forget(s3_endpoint.url)  # probed below, in this test
    if store == "swift":
        _conditions_are_refused(s3_endpoint, bucket, s3_client)
        return
    if Capability.CONDITIONAL_REPLACE in MEASURED[store][0]:
        _conditions_are_ignored(s3_endpoint, bucket, s3_client)
        return

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            first = await client.put_object(bucket, "doc.json", b"1", if_none_match=True)
            with pytest.raises(PreconditionFailed):
                await client.put_object(bucket, "doc.json", b"x", if_none_match=True)
            if store == "rgw":  # before the probe: the ETag goes quoted, as S3 gave it, and RGW 16 refuses it
                with pytest.raises(PreconditionFailed):
                    await client.put_object(bucket, "doc.json", b"2", if_match=first.etag)
            await store_capabilities(client, bucket, SCRATCH)
            second = await client.put_object(bucket, "doc.json", b"2", if_match=first.etag)
            with pytest.raises(PreconditionFailed):  # the old ETag: refused, never written unconditionally
                await client.put_object(bucket, "doc.json", b"x", if_match=first.etag)
            assert second.etag == s3_client.head_object(Bucket=bucket, Key="doc.json")["ETag"]

    _run(main())
    assert s3_client.get_object(Bucket=bucket, Key="doc.json")["Body"].read() == b"2"


def _conditions_are_refused(s3_endpoint: S3Endpoint, bucket: str, s3_client: Any) -> None:
    """Swift 2.30.1: a conditional PUT is 501 NotImplemented, creating or replacing, and writes nothing."""

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            with pytest.raises(RequestError) as create:
                await client.put_object(bucket, "doc.json", b"1", if_none_match=True)
            first = await client.put_object(bucket, "doc.json", b"1")
            with pytest.raises(RequestError) as replace:
                await client.put_object(bucket, "doc.json", b"2", if_match=first.etag)
            assert (create.value.status, create.value.code) == (replace.value.status, replace.value.code)
            assert (create.value.status, create.value.code) == (501, "NotImplemented")

    _run(main())
    assert s3_client.get_object(Bucket=bucket, Key="doc.json")["Body"].read() == b"1"


def _conditions_are_ignored(s3_endpoint: S3Endpoint, bucket: str, s3_client: Any) -> None:
    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            first = await client.put_object(bucket, "doc.json", b"1", if_none_match=True)
            await client.put_object(bucket, "doc.json", b"2", if_none_match=True)
            await client.put_object(bucket, "doc.json", b"3", if_match='"00000000000000000000000000000000"')
            await client.delete_object(bucket, "doc.json", if_match=first.etag)

    _run(main())
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # every write landed, the delete too


def test_store_capabilities_are_kept_by_endpoint_and_bucket(s3_endpoint: S3Endpoint, bucket: str) -> None:
    """Conditions can differ by bucket (RGW ignores them in a versioned one): each bucket's verdict is its own."""

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            verdict = await store_capabilities(client, bucket, SCRATCH)
            assert VERDICTS.get(endpoint_key(client.endpoint), bucket) is verdict and verdict.bucket == bucket

    _run(main())


# ------------------------------------------------------------------------------------- ranges and ETags


def test_ranges_match_boto3(store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any) -> None:
    """Where the store answers a range wrongly (s3rver: ``bytes=-5`` of 1,024 bytes as 6 bytes from the start),
    boto3 returns those bytes and s3io refuses them: never wrong bytes."""
    data = bytes(range(256)) * 4
    s3_client.put_object(Bucket=bucket, Key="r.bin", Body=data)
    cases = [
        (GetRange.bounded(0, 10), "bytes=0-9", data[:10]),
        (GetRange.starting_at(10), "bytes=10-", data[10:]),
        (GetRange.suffix(5), "bytes=-5", data[-5:]),
    ]

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            for want, header, right in cases:
                oracle = s3_client.get_object(Bucket=bucket, Key="r.bin", Range=header)["Body"].read()
                if store == "s3rver" and header == "bytes=-5":
                    assert oracle == data[:6]  # what boto3 takes from it
                    with pytest.raises(ProtocolError, match="asked bytes=-5, the server answered"):
                        await client.get_range(bucket, "r.bin", want)
                    continue
                assert (await client.get_range(bucket, "r.bin", want)).data == oracle == right
            with pytest.raises(RequestError) as past:
                await client.get_range(bucket, "r.bin", GetRange.bounded(5000, 5010))
            assert past.value.status == 416

    _run(main())
    with pytest.raises(ClientError) as boto_past:
        s3_client.get_object(Bucket=bucket, Key="r.bin", Range="bytes=5000-5009")
    assert boto_past.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


def test_listings_heads_and_multipart_written_objects_read_as_boto3_reads_them(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """Pages of three, with and without a delimiter, keys with a space, a plus and a non-ASCII letter; each object's
    HEAD; an object boto3 wrote in two parts, read whole and across the part boundary. Listings give whole seconds
    (``parse_timestamp``), boto3 what the store sent. Measured store defects, boto3 alike: LocalStack's pages after
    a continuation drop keys whose URL-encoded form sorts before it (``lake/ü.bin``); s3rver answers a page smaller
    than the listing 500 InternalError."""
    keys = ["lake/a.bin", "lake/b c.bin", "lake/+plus.bin", "lake/\u00fc.bin", "lake/x/1.bin", "lake/x/2.bin"]
    keys += ["lake/y/z/3.bin", "other.bin"]
    for i, key in enumerate(keys):
        s3_client.put_object(Bucket=bucket, Key=key, Body=bytes([i]) * (100 + i))
    parts = [bytes(range(256)) * (5 * 1024 * 4), b"tail" * 1000]  # 5 MiB, then 4,000 bytes
    upload = s3_client.create_multipart_upload(Bucket=bucket, Key="lake/mpu.bin")["UploadId"]
    etags = [
        s3_client.upload_part(Bucket=bucket, Key="lake/mpu.bin", UploadId=upload, PartNumber=n, Body=body)["ETag"]
        for n, body in enumerate(parts, 1)
    ]
    s3_client.complete_multipart_upload(
        Bucket=bucket,
        Key="lake/mpu.bin",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]},
    )
    whole, boundary = b"".join(parts), len(parts[0])

    def boto3_pages(**kwargs: Any) -> tuple[list[tuple[str, int, str, float]], list[str]]:
        objects, prefixes = [], []
        paginator = s3_client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix="lake/", PaginationConfig={"PageSize": 3}, **kwargs):
            contents = page.get("Contents", [])
            objects += [(o["Key"], o["Size"], o["ETag"], math.floor(o["LastModified"].timestamp())) for o in contents]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        return objects, prefixes

    async def listing(delimiter: str | None) -> tuple[list[tuple[str, int, str | None, float | None]], list[str]]:
        objects, prefixes = [], []
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            async for page, common in client.list_pages(bucket, "lake/", delimiter=delimiter, page_size=3):
                objects += [(o.key, o.size, o.etag, o.last_modified) for o in page]
                prefixes += common
        return objects, prefixes

    async def reads() -> Any:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            heads = {key: await client.head_object(bucket, key) for key in [*keys, "lake/mpu.bin"]}
            read = (await client.get_object(bucket, "lake/mpu.bin")).data
            across = await client.get_range(bucket, "lake/mpu.bin", GetRange.bounded(boundary - 10, boundary + 10))
            return heads, bytes(read), bytes(across.data)

    if store == "s3rver":
        with pytest.raises(ServerError, match="status=500; code=InternalError"):
            _run(listing(None))
        with pytest.raises(ClientError, match="InternalError"):
            boto3_pages()
    else:
        flat, nested = _run(listing(None)), _run(listing("/"))
        assert flat == boto3_pages() and nested == boto3_pages(Delimiter="/")
        listed = [key for key, *_ in flat[0]]
        expected = sorted(k for k in [*keys, "lake/mpu.bin"] if k.startswith("lake/"))
        if store == "localstack":
            expected.remove("lake/\u00fc.bin")
        assert listed == expected
        assert nested[1] == ["lake/x/", "lake/y/"]
    heads, read, across = _run(reads())
    for key, info in heads.items():
        oracle = s3_client.head_object(Bucket=bucket, Key=key)
        assert (info.size, info.etag, info.last_modified) == (
            oracle["ContentLength"],
            oracle["ETag"],
            oracle["LastModified"].timestamp(),
        ), key
    assert read == whole == s3_client.get_object(Bucket=bucket, Key="lake/mpu.bin")["Body"].read()
    oracle_range = f"bytes={boundary - 10}-{boundary + 9}"
    assert across == s3_client.get_object(Bucket=bucket, Key="lake/mpu.bin", Range=oracle_range)["Body"].read()
    assert across == whole[boundary - 10 : boundary + 10]


def test_reads_pinned_to_an_etag_refuse_a_replaced_object(s3_endpoint: S3Endpoint, bucket: str, s3_client: Any) -> None:
    old = s3_client.put_object(Bucket=bucket, Key="pin.bin", Body=b"old")["ETag"]
    s3_client.put_object(Bucket=bucket, Key="pin.bin", Body=b"new")

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            with pytest.raises(ObjectChanged):
                await client.get_object(bucket, "pin.bin", if_match=old)
            with pytest.raises(PreconditionFailed):
                await client.head_object(bucket, "pin.bin", if_match=old)
            current = await client.head_object(bucket, "pin.bin")
            assert (await client.get_object(bucket, "pin.bin", if_match=current.etag)).data == b"new"

    _run(main())


def test_multipart_upload_completes_without_a_retry(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    data = bytes(range(251)) * (11 * 1024 * 1024 // 251)  # three parts: 5 MiB, 5 MiB, the rest

    async def main() -> Any:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            async with client.multipart_writer(bucket, "mpu.bin", part_size=5 * 1024 * 1024) as writer:
                await writer.write(data)
            return writer.result, client.stats()

    result, stats = _run(main())
    head = s3_client.head_object(Bucket=bucket, Key="mpu.bin")
    assert result.etag == head["ETag"] and head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"') == (store != "s3rver")  # s3rver's is the MD5 of the whole object
    assert stats.retries == {}
    assert stats.requests_for(COMPLETE_MULTIPART_HEAD) == (1 if store == "rgw" else 0)
    assert s3_client.get_object(Bucket=bucket, Key="mpu.bin")["Body"].read() == data


def test_a_first_multipart_upload_completes_on_every_store_swift_s_through_the_checksum_fallback(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """Nothing learnt of the store yet, the upload declares a full-object CRC64NVME and each part's: Swift 2.30.1
    refuses the completion with them (400 MalformedXML), then with the parts' alone; without either it completes,
    and its next upload declares none. Every other store completes at the first try."""
    REFUSALS.forget(s3_endpoint.url)
    data = bytes(range(253)) * (11 * 1024 * 1024 // 253)

    async def main() -> Any:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            async with client.multipart_writer(bucket, "first.bin", part_size=5 * 1024 * 1024) as writer:
                await writer.write(data)
            return client.stats()

    stats = _run(main())
    refused = stats.requests.get(("complete_multipart", 400), 0)
    assert refused == (2 if store == "swift" else 0), stats.requests
    assert REFUSALS.refused(s3_endpoint.url, Feature.FULL_OBJECT_MULTIPART) == (store == "swift")
    assert s3_client.get_object(Bucket=bucket, Key="first.bin")["Body"].read() == data
    if store != "s3rver":  # s3rver implements no ListMultipartUploads (501)
        assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# ---------------------------------------------------------------------------- compaction and the stream's lease


def test_compaction_runs_where_the_store_has_every_condition_and_is_refused_by_name_elsewhere(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """On s3rver (every condition ignored) nothing is written, not even a lock; on moto and RGW 16 (whose DELETE
    ignores If-Match: its inputs are deleted under x-amz-delete-if-unmodified-since) the prefix is compacted, the
    rows as pyarrow reads them unchanged."""
    original = write_landing_zone(s3_client, bucket, "lake/", {"date=1": 5})
    if store == "rgw":
        time.sleep(2.5)  # RGW's delete guard has whole seconds: files younger than 2 s are left for a later run
    before = {o["Key"]: o["ETag"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    options = CompactionOptions(grace_period=0.2, lease_ttl=10.0, clock_skew=0.0, owner="conformance")

    async def main() -> Any:
        async with make_client(s3_endpoint.url) as client:
            return await compact_prefix(client, f"s3://{bucket}/lake/", options)

    report = _run(main())
    refusal = COMPACTION[store]
    if refusal is None:
        assert report.status == "ok" and report.files_after == 1 and report.store, report.to_text()
        assert len(data_keys(s3_client, bucket, "lake/")) == 1
    else:
        assert report.status == "refused" and refusal in report.message, report.to_text()
        assert "nothing was compacted and no lock was taken" in report.message
        after = {o["Key"]: o["ETag"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
        assert after == before
    assert same_rows(plain_table(s3_client, bucket, "lake/"), original)


def test_a_write_commits_where_the_store_has_every_condition_and_is_refused_by_name_elsewhere(
    store: str, s3_endpoint: S3Endpoint, bucket: str, s3_client: Any
) -> None:
    """The writer's commit asks the store what compaction asks (its journal entry, an overwrite's lock): on moto the
    rows are written, on RGW 16 too (it lacks only the conditional DELETE, which the commit does not need); on
    s3rver the commit is refused by name, nothing is visible and no upload is left."""
    rows = pa.table({"id": pa.array(range(300), pa.int64()), "day": [f"d{i % 3}" for i in range(300)]})
    url = f"s3://{bucket}/written/"
    refusal = COMPACTION[store]
    settings = {"endpoint_url": s3_endpoint.url, "partition_by": ["day"]}
    if refusal is None:
        report = s3io.write_parquet(rows, url, **settings)
        assert report.rows == 300 and len(report.files) == 3, report.summary()
        back = s3io.read_parquet(url, endpoint_url=s3_endpoint.url)
        assert sorted(back.column("id").to_pylist()) == list(range(300))
    else:
        with pytest.raises(ConditionalWritesUnsupported) as refused:
            s3io.write_parquet(rows, url, **settings)
        assert refusal in str(refused.value) and "nothing was committed" in str(refused.value)
        assert "the write's commit" in str(refused.value)
        if store == "s3rver":  # it has no AbortMultipartUpload (405): noted on the refusal, which stays the error
            assert any("aborting the write's uploads failed too" in note for note in refused.value.__notes__)
        assert data_keys(s3_client, bucket, "written/") == []
    if store != "s3rver":  # s3rver implements no ListMultipartUploads (501)
        assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_the_stream_lease_renews_with_one_conditional_put_or_refuses_the_store_by_name(
    store: str, s3_endpoint: S3Endpoint, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RGW 16 takes the lease's If-Match only unquoted: each renewal is one PUT (it was PUT 412, HEAD, GET, PUT and
    a warning about another holder). s3rver ignores conditions: the stream stops at its start, naming them."""
    caplog.set_level(logging.WARNING, logger="s3io.stream_state")
    state = f"s3://{bucket}/lake/_s3io_streams/c/"
    body = Lease(stream="conformance", owner="driver", state=state, committed_batch=-1, ttl=600.0, max_file_age=None)

    async def main() -> Any:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            lease = StreamLease(client, bucket, "lake/", body)
            await lease.adopt()
            await lease.write()
            before = client.stats()
            await lease.write()
            await lease.write(committed_batch=1)
            return client.stats() - before

    if Capability.CONDITIONAL_CREATE in MEASURED[store][0]:
        with pytest.raises(MissingCapability, match=r"conditional create \(PUT If-None-Match: \*\)"):
            _run(main())
        return
    spent = _run(main())
    assert spent.request_count == 2 and spent.requests.get(("put", 200)) == 2, spent.requests
    assert not [r.getMessage() for r in caplog.records if r.name == "s3io.stream_state"]  # no "another holder"


# ------------------------------------------------------------------- test bodies reused from their modules
# Each runs here on RGW, LocalStack and Swift (the CLI's and Spark's on RGW only; its moto run is in its home module);
# the module fixtures they take come along.

fs = test_fs_filesystem.fs
obj = test_fs_filesystem.obj

test_read_parquet_of_a_prefix = test_api_read.test_read_parquet_of_a_prefix_equals_pyarrow_and_skips_hidden_files
test_read_parquet_globs_and_lists = test_api_read.test_globs_single_objects_and_lists_of_urls
test_read_parquet_columns_and_filters = test_api_read.test_columns_in_the_order_given_and_filters_applied_exactly
test_iter_batches_streams_and_closes = test_api_read.test_iter_batches_streams_and_closing_early_cancels_the_reading
test_fsspec_round_trip = test_fs_filesystem.test_put_ls_info_cat_rm_round_trip
test_fsspec_cat_file_limits = test_fs_filesystem.test_cat_file_limits_match_a_local_file
test_fsspec_cat_ranges = test_fs_filesystem.test_cat_ranges_returns_results_in_request_order
test_fsspec_whole_read_pinned = test_fs_filesystem.test_whole_object_read_is_chunked_and_pinned_to_the_first_etag
test_fsspec_object_replaced_while_open = test_fs_filesystem.test_object_replaced_while_open_raises_file_expired
test_fsspec_multipart_write = test_fs_filesystem.test_multipart_write_through_an_open_file
test_engine_one_get_per_small_object = test_engine_s3.test_small_object_is_exactly_one_get_and_no_head
test_engine_parallel_parts = test_engine_s3.test_large_object_is_split_into_parallel_parts_and_reassembled
test_engine_tail_reads = test_engine_s3.test_fetch_tail_with_known_and_unknown_size
test_engine_overwrite_between_parts = (
    test_engine_s3.test_object_overwritten_between_parts_of_one_read_raises_object_changed
)
test_cli_cat_and_ranges = test_cli.test_cat_whole_and_ranges
test_cli_ls_and_stat = test_cli.test_ls_and_stat
test_cli_missing_object = test_cli.test_missing_object_is_a_one_line_error_with_nonzero_exit
test_spark_batch_flat = test_spark_source.test_flat_layout_matches_pyarrow_and_packs_small_files_like_spark
test_spark_batch_hive = test_spark_source.test_hive_layout_matches_pyarrow_and_partition_paths_read_only_matching_files
test_spark_batch_large_files = test_spark_source.test_mixed_small_and_large_files_split_large_ones_at_row_groups
test_spark_stream_available_now = test_spark_stream.test_available_now_reads_only_what_was_there_when_it_started
