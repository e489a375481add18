"""The store-capability probe's verdicts: moto made to answer as S3 documents, then as stores that lack one
behaviour at a time (testbed/store_quirks.py); and the client's use of a verdict (the If-Match form a store
honours, an ETag a CompleteMultipartUpload answer left out). The verdicts on Ceph RGW: test_store_conformance.py."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from s3io import Policy
from s3io.errors import PreconditionFailed, TransportError
from s3io.s3.capabilities import (
    VERDICTS,
    Capability,
    DeleteGuard,
    EtagForm,
    Gap,
    MissingCapability,
    StoreCapabilities,
)
from s3io.s3.checksum_refusals import REFUSALS, Feature
from s3io.s3.client import S3Client
from s3io.s3.multipart_uploads import COMPLETE_MULTIPART_HEAD
from s3io.s3.probe import probe_store, store_capabilities
from testbed import store_quirks as quirks
from testbed.moto_server import Middleware, boto3_client
from testbed.store_quirks import lax_conditionals, store_with, without_etags

pytestmark = pytest.mark.timeout(60)

POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.05)
SCRATCH = "tmp/_s3io_probe/"
S3_AS_DOCUMENTED = quirks.honours_bulk_etags  # moto plus per-object ETags in DeleteObjects


@pytest.fixture(autouse=True)
def _no_remembered_verdicts() -> Iterator[None]:
    VERDICTS.forget()
    REFUSALS.forget()
    yield
    VERDICTS.forget()
    REFUSALS.forget()


async def _probe(url: str, bucket: str) -> StoreCapabilities:
    async with S3Client(POLICY, endpoint_url=url) as client:
        return await probe_store(client, bucket, SCRATCH)


def _left_behind(s3_client: Any, bucket: str) -> list[str]:
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=SCRATCH).get("Contents", [])
    uploads = s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return [o["Key"] for o in listed] + [u["Key"] for u in uploads]


async def test_a_store_that_answers_as_s3_documents_lacks_nothing(bucket: str, s3_client: Any) -> None:
    with store_with(S3_AS_DOCUMENTED) as url:
        verdict = await _probe(url, bucket)
    assert verdict.gaps == () and verdict.if_match_form is EtagForm.QUOTED
    assert verdict.clock is not None and verdict.clock_offset is not None and abs(verdict.clock_offset) <= 2
    assert 20 <= verdict.requests <= 30
    assert "has every capability" in verdict.summary()
    assert _left_behind(s3_client, bucket) == []


MISSING_ONE_AT_A_TIME = [
    pytest.param(
        [quirks.ignores_header("PUT", "If-None-Match")],
        Capability.CONDITIONAL_CREATE,
        "PUT If-None-Match: * was ignored (an existing object was overwritten)",
        id="create-ignored",
    ),
    pytest.param(
        [quirks.refuses_header("PUT", "If-None-Match")],
        Capability.CONDITIONAL_CREATE,
        "PUT If-None-Match: * answered 501 NotImplemented",
        id="create-not-implemented",
    ),
    pytest.param(
        [quirks.ignores_header("PUT", "If-Match")],
        Capability.CONDITIONAL_REPLACE,
        "PUT If-Match: <another ETag> was ignored (an object was replaced despite another ETag)",
        id="replace-ignored",
    ),
    pytest.param(
        [quirks.refuses_every_if_match_put],
        Capability.CONDITIONAL_REPLACE,
        "PUT If-Match refused the object's own ETag, quoted and unquoted",
        id="replace-never-holds",
    ),
    pytest.param(
        [quirks.ignores_header("DELETE", "If-Match"), quirks.honours_delete_if_unmodified_since],
        Capability.CONDITIONAL_DELETE,
        "DELETE If-Match was ignored (an object was deleted despite another ETag)",
        id="delete-ignored-as-rgw",
    ),
    pytest.param(
        [quirks.ignores_ranges],
        Capability.RANGES,
        "a GET with a Range was answered 200 with the whole object",
        id="ranges-ignored",
    ),
    pytest.param(
        [quirks.empties_multipart_etag],
        Capability.MULTIPART_ETAG,
        "the first CompleteMultipartUpload answer had an empty <ETag>",
        id="multipart-etag-empty",
    ),
]


@pytest.mark.parametrize(("quirk", "capability", "detail"), MISSING_ONE_AT_A_TIME)
async def test_each_missing_capability_is_named_alone(
    bucket: str, s3_client: Any, quirk: list[Middleware], capability: Capability, detail: str
) -> None:
    with store_with(S3_AS_DOCUMENTED, *quirk) as url:
        verdict = await _probe(url, bucket)
    assert verdict.missing == (capability,)
    gap = verdict.gap(capability)
    assert gap is not None and detail in gap.detail
    assert gap.describe() in verdict.summary() and "\n" not in verdict.summary()
    assert _left_behind(s3_client, bucket) == []


DELETE_GUARDS = [
    pytest.param([], DeleteGuard.CONDITIONAL_DELETE, (), id="as-aws-documents"),
    pytest.param(
        [quirks.ignores_header("DELETE", "If-Match"), quirks.honours_delete_if_unmodified_since],
        DeleteGuard.UNMODIFIED_SINCE,
        (Capability.CONDITIONAL_DELETE,),
        id="as-rgw-16",
    ),
    pytest.param(
        [quirks.refuses_header("DELETE", "If-Match")],
        DeleteGuard.HEAD_IF_MATCH,
        (Capability.CONDITIONAL_DELETE, Capability.DELETE_IF_UNMODIFIED_SINCE),
        id="as-localstack",
    ),
    pytest.param(
        [quirks.ignores_header("DELETE", "If-Match")],
        DeleteGuard.HEAD_IF_MATCH,
        (Capability.CONDITIONAL_DELETE, Capability.DELETE_IF_UNMODIFIED_SINCE),
        id="ignores-both",
    ),
]


@pytest.mark.parametrize(("quirk", "guard", "missing"), DELETE_GUARDS)
async def test_the_verdict_names_the_best_delete_guard_the_store_honours(
    bucket: str, s3_client: Any, quirk: list[Middleware], guard: DeleteGuard, missing: tuple[Capability, ...]
) -> None:
    """Conditional DELETE where it holds (AWS, moto); else RGW's x-amz-delete-if-unmodified-since where that holds;
    else a HEAD If-Match before the DELETE, which is not atomic. The summary names the guard."""
    with store_with(S3_AS_DOCUMENTED, *quirk) as url:
        verdict = await _probe(url, bucket)
    assert verdict.delete_guard is guard and verdict.delete_guard.atomic is (guard is not DeleteGuard.HEAD_IF_MATCH)
    assert verdict.missing == missing, verdict.summary()
    assert f"data files are deleted through {guard.value}" in verdict.summary()
    assert verdict.bucket == bucket and _left_behind(s3_client, bucket) == []


CHECKSUMS = (Capability.UPLOAD_CHECKSUMS, Capability.FULL_OBJECT_MULTIPART)


@pytest.mark.parametrize(
    ("quirk", "detail", "refused"),
    [
        (quirks.ignores_checksum_headers, "accepted, but a HEAD with checksum mode states none (it keeps none)", False),
        (quirks.refuses_checksum_headers, "refused (HTTP 400 InvalidArgument", True),
    ],
    ids=["kept-none-like-rgw-16", "refused"],
)
async def test_checksum_capabilities_a_store_lacks_are_named_and_a_refused_form_is_never_sent_again(
    bucket: str, s3_client: Any, quirk: Middleware, detail: str, refused: bool
) -> None:
    """The probe's own uploads find what the store does with checksums; a verdict handed to another process (a
    worker, a Spark executor: pickled, without its clock) makes that process's clients send no refused form."""
    with store_with(S3_AS_DOCUMENTED, quirk) as url:
        verdict = await _probe(url, bucket)
        assert verdict.missing == CHECKSUMS and verdict.checksums_probed, verdict.summary()
        for capability in CHECKSUMS:
            gap = verdict.gap(capability)
            assert gap is not None and gap.detail.startswith(detail) and gap.refused is refused
        assert _left_behind(s3_client, bucket) == []
        REFUSALS.forget()  # as in a fresh worker process
        in_a_worker = pickle.loads(pickle.dumps(verdict.portable()))
        assert in_a_worker.clock is None and in_a_worker.gaps == verdict.gaps
        VERDICTS.remember(in_a_worker)
        assert [REFUSALS.refused(verdict.endpoint, f) for f in Feature] == [refused, refused]
        async with S3Client(POLICY, endpoint_url=url) as client:
            put = await client.put_object(bucket, "sealed.bin", b"x" * 100)
            async with client.multipart_writer(bucket, "sealed-mpu.bin", part_size=5 * 1024 * 1024) as writer:
                await writer.write(b"y" * (6 * 1024 * 1024))
            stats = client.stats()
    assert sum(n for (_, status), n in stats.requests.items() if status == 400) == 0  # nothing refused was sent
    assert (put.checksum is None, writer.result.checksum is None) == (refused, refused)


async def test_a_store_ignoring_per_object_etags_in_delete_objects_lacks_only_that(bucket: str, s3_client: Any) -> None:
    with store_with(quirks.ignores_bulk_etags) as url:  # moto before 5.2.6
        verdict = await _probe(url, bucket)
    assert verdict.missing == (Capability.BULK_CONDITIONAL_DELETE,)
    assert "DeleteObjects ignored a per-object ETag" in verdict.gaps[0].detail
    assert _left_behind(s3_client, bucket) == []


async def test_a_store_that_ignores_every_condition_lacks_create_replace_and_delete(bucket: str) -> None:
    with store_with(S3_AS_DOCUMENTED, lax_conditionals) as url:
        verdict = await _probe(url, bucket)
    assert verdict.missing == (
        Capability.CONDITIONAL_CREATE,
        Capability.CONDITIONAL_REPLACE,
        Capability.CONDITIONAL_DELETE,
        Capability.DELETE_IF_UNMODIFIED_SINCE,
    )
    assert verdict.delete_guard is DeleteGuard.HEAD_IF_MATCH
    with pytest.raises(MissingCapability) as raised:
        verdict.require(Capability.CONDITIONAL_CREATE, Capability.RANGES, needed_by="the journal")
    message = str(raised.value)
    assert "the journal needs" in message and "conditional create (PUT If-None-Match: *)" in message
    assert "byte ranges" not in message and "conditional replace" not in message


async def test_a_store_that_takes_only_unquoted_etags_gets_them_once_probed(bucket: str, s3_client: Any) -> None:
    """Ceph RGW 16 refuses PUT If-Match with the object's own ETag quoted: the verdict says so, and the client then
    sends the ETag unquoted, while a wrong ETag is still refused (never an unconditional write)."""
    etag = s3_client.put_object(Bucket=bucket, Key="doc", Body=b"v1")["ETag"]
    with store_with(S3_AS_DOCUMENTED, quirks.refuses_quoted_if_match) as url:
        async with S3Client(POLICY, endpoint_url=url) as client:
            with pytest.raises(PreconditionFailed):  # not probed yet: the ETag goes as given, quoted, and is refused
                await client.put_object(bucket, "doc", b"v2", if_match=etag)
            verdict = await store_capabilities(client, bucket, SCRATCH)
            assert verdict.gaps == () and verdict.if_match_form is EtagForm.BARE
            assert "PUT If-Match needs the ETag unquoted" in verdict.summary()
            written = await client.put_object(bucket, "doc", b"v2", if_match=etag)
            for wrong in ('"00000000000000000000000000000001"', "00000000000000000000000000000001", etag):
                with pytest.raises(PreconditionFailed):
                    await client.put_object(bucket, "doc", b"v3", if_match=wrong)
    assert s3_client.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"v2"
    assert written.etag == s3_client.head_object(Bucket=bucket, Key="doc")["ETag"]


async def test_the_verdict_is_kept_per_endpoint_and_logged_once(bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="s3io")
    with store_with(S3_AS_DOCUMENTED) as first, store_with(S3_AS_DOCUMENTED, quirks.ignores_ranges) as second:
        async with S3Client(POLICY, endpoint_url=first) as client:
            verdict = await store_capabilities(client, bucket, SCRATCH)
            before = client.stats().request_count
            assert await store_capabilities(client, bucket, SCRATCH) is verdict
            assert client.stats().request_count == before
        async with S3Client(POLICY, endpoint_url=first) as another_client:  # another client, the same endpoint
            assert await store_capabilities(another_client, bucket, SCRATCH) is verdict
            assert another_client.stats().request_count == 0
        async with S3Client(POLICY, endpoint_url=second) as client:
            other = await store_capabilities(client, bucket, SCRATCH)
    assert other.missing == (Capability.RANGES,) and verdict.gaps == ()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store http")]
    assert lines == [verdict.summary(), other.summary()]


async def test_an_empty_etag_in_the_complete_answer_costs_one_head_and_no_retry(bucket: str, s3_client: Any) -> None:
    """Ceph RGW 16's first CompleteMultipartUpload answer has an empty <ETag>; completing again would be a retry
    (and on S3 a NoSuchUpload): the client reads the ETag with one HEAD and checks it is the one its parts make."""
    data = bytes(range(256)) * (6 * 1024 * 1024 // 256)  # two parts of 5 MiB and 1 MiB
    with store_with(quirks.empties_multipart_etag) as url:
        async with S3Client(POLICY, endpoint_url=url) as client:
            async with client.multipart_writer(bucket, "big.bin", part_size=5 * 1024 * 1024) as writer:
                await writer.write(data)
            stats = client.stats()
    head = s3_client.head_object(Bucket=bucket, Key="big.bin")
    assert writer.result.etag == head["ETag"] and head["ETag"].endswith('-2"')
    assert stats.retries == {}
    assert stats.requests_for("complete_multipart") == 1 and stats.requests_for(COMPLETE_MULTIPART_HEAD) == 1
    assert s3_client.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == data


async def test_a_store_that_sends_no_etags_is_refused_by_name_and_left_clean(bucket: str, s3_client: Any) -> None:
    no_etags = without_etags(lambda method, path: True)
    with store_with(S3_AS_DOCUMENTED, no_etags) as url, pytest.raises(MissingCapability, match="sent no ETag"):
        await _probe(url, bucket)
    assert _left_behind(s3_client, bucket) == []


async def test_a_probe_that_cannot_reach_the_store_raises_and_remembers_nothing(bucket: str) -> None:
    with store_with() as url:
        pass  # the port is free again: nothing listens there
    async with S3Client(Policy(max_attempts=1), endpoint_url=url) as client:
        with pytest.raises(TransportError):
            await store_capabilities(client, bucket, SCRATCH)
    assert VERDICTS.get(url) is None


def test_require_passes_when_nothing_needed_is_missing() -> None:
    verdict = StoreCapabilities("http://store", (Gap(Capability.MULTIPART_ETAG, "empty"),))
    verdict.require(Capability.CONDITIONAL_CREATE, Capability.CONDITIONAL_REPLACE, needed_by="a lease")
    assert verdict.supports(Capability.RANGES) and not verdict.supports(Capability.MULTIPART_ETAG)
    assert verdict.if_match('"abc"') == '"abc"'
    assert StoreCapabilities("http://store", if_match_form=EtagForm.BARE).if_match('"abc"') == "abc"


def test_boto3_sees_the_same_objects_the_probe_cleans_up(s3_endpoint: Any, bucket: str) -> None:
    """The quirk servers share moto's backend with the session server: what a probe leaves is visible there."""
    client = boto3_client(s3_endpoint.url)
    with store_with() as url:
        boto3_client(url).put_object(Bucket=bucket, Key=f"{SCRATCH}x", Body=b"x")
    assert _left_behind(client, bucket) == [f"{SCRATCH}x"]
