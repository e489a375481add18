"""One suite, every store: the read paths, multipart uploads, ranges, ETag pins and the probe's verdict, run on moto
(the session's strict server) and on a real Ceph RGW (tests/support/rgw.py; skipped, with the reason, where it
cannot run). Where a peer does the job (boto3, pyarrow) it is the oracle.

The RGW's S3 user signs with the session's fake keys, so a test body written for moto runs here unchanged: this
module's ``s3_endpoint`` is parametrised by store, and the conftest's ``bucket``, ``s3_client`` and
``fault_proxy`` (and the reused modules' ``fs`` and ``obj``) follow it. Test bodies reused from their home modules
are listed at the end: they run here on RGW only, as their home module runs them on moto. Spark batch and stream
and compaction on RGW come in a second round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import test_api_read
import test_cli
import test_engine_s3
import test_fs_filesystem
from botocore.exceptions import ClientError
from support.moto_server import MotoServer, S3Endpoint

from s3io import Policy
from s3io.errors import ObjectChanged, PreconditionFailed, RequestError
from s3io.s3.capabilities import VERDICTS, Capability, EtagForm, endpoint_key
from s3io.s3.client import COMPLETE_MULTIPART_HEAD, S3Client
from s3io.s3.get_range import GetRange
from s3io.s3.probe import probe_store, store_capabilities

pytestmark = pytest.mark.timeout(120)

STORES = ("moto", "rgw")
POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.2)
SCRATCH = "tmp/_s3io_probe/"
# What each store lacks, and the If-Match form it takes: measured (moto 5.2.5; Ceph RGW 16.2.15, Debian bookworm).
MEASURED = {
    "moto": ((Capability.BULK_CONDITIONAL_DELETE,), EtagForm.QUOTED),
    "rgw": (
        (Capability.CONDITIONAL_DELETE, Capability.BULK_CONDITIONAL_DELETE, Capability.MULTIPART_ETAG),
        EtagForm.BARE,
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test here runs on every store, except a reused body's moto run, which its home module already has."""
    if "store" in metafunc.fixturenames:
        own = metafunc.function.__module__ == __name__
        metafunc.parametrize("store", STORES if own else ("rgw",), indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def s3_endpoint(store: str, moto_server: MotoServer, request: pytest.FixtureRequest) -> S3Endpoint:
    """The store under test (overrides the conftest's moto-only fixture for this module)."""
    return moto_server.endpoint if store == "moto" else request.getfixturevalue("rgw").endpoint


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
    VERDICTS.forget(s3_endpoint.url)  # probed below, in this test

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


def test_store_capabilities_are_kept_by_endpoint(s3_endpoint: S3Endpoint, bucket: str) -> None:
    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            verdict = await store_capabilities(client, bucket, SCRATCH)
            assert VERDICTS.get(endpoint_key(client.endpoint)) is verdict

    _run(main())


# ------------------------------------------------------------------------------------- ranges and ETags


def test_ranges_match_boto3(s3_endpoint: S3Endpoint, bucket: str, s3_client: Any) -> None:
    data = bytes(range(256)) * 4
    s3_client.put_object(Bucket=bucket, Key="r.bin", Body=data)
    cases = [
        (GetRange.bounded(0, 10), "bytes=0-9"),
        (GetRange.starting_at(10), "bytes=10-"),
        (GetRange.suffix(5), "bytes=-5"),
    ]

    async def main() -> None:
        async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
            for want, header in cases:
                oracle = s3_client.get_object(Bucket=bucket, Key="r.bin", Range=header)["Body"].read()
                assert (await client.get_range(bucket, "r.bin", want)).data == oracle
            with pytest.raises(RequestError) as past:
                await client.get_range(bucket, "r.bin", GetRange.bounded(5000, 5010))
            assert past.value.status == 416

    _run(main())
    with pytest.raises(ClientError) as boto_past:
        s3_client.get_object(Bucket=bucket, Key="r.bin", Range="bytes=5000-5009")
    assert boto_past.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


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
    assert result.etag == head["ETag"] and head["ETag"].endswith('-3"') and head["ContentLength"] == len(data)
    assert stats.retries == {}
    assert stats.requests_for(COMPLETE_MULTIPART_HEAD) == (1 if store == "rgw" else 0)
    assert s3_client.get_object(Bucket=bucket, Key="mpu.bin")["Body"].read() == data


# ------------------------------------------------------------------- test bodies reused from their modules
# Each runs here on RGW (its moto run is in its home module); the module fixtures they take come along.

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
