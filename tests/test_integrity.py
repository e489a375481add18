"""End-to-end integrity with S3's checksums: uploads carry a CRC64NVME the store keeps (a multipart upload a
full-object one combined from its parts'), whole-object reads are checked against the stored checksum, bytes that
lack it are never returned, and a ranged read is not checked (docs/integrity.md). Against moto behind the strict
SigV4 front (the checksum headers are signed) and the scripted server (another object's bytes under the right
headers)."""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from awscrt import checksums as crt

from s3io import Credentials, ObjectInfo, Policy, S3Client, errors
from s3io.engine import EngineConfig, RangeEngine
from s3io.s3.checksum_refusals import REFUSALS, Feature
from s3io.s3.checksums import COMPOSITE, CRC32, CRC32C, CRC64NVME, PartChecksums, StoredChecksum, stated_checksum
from s3io.s3.get_range import GetRange
from s3io.s3.types import PutResult
from testbed.scripted_s3 import Reply, Request, ScriptedS3, checksum_headers, error_reply, etag_of

pytestmark = pytest.mark.timeout(120)

MiB = 1024 * 1024
QUICK = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.02, operation_timeout=30)
SIZE = 10_000
A = random.Random(1).randbytes(SIZE)
B = random.Random(2).randbytes(SIZE)  # another object of the same size: its bytes fit A's headers exactly


def crc64nvme(data: bytes) -> str:
    """The CRC64NVME S3 states, computed here independently of s3io."""
    return base64.b64encode(crt.crc64nvme(data).to_bytes(8, "big")).decode()


def run(work: Any) -> Any:
    return asyncio.run(work)


@pytest.fixture(autouse=True)
def _no_learnt_refusals() -> Iterator[None]:
    REFUSALS.forget()
    yield
    REFUSALS.forget()


@pytest.fixture
def server() -> Iterator[ScriptedS3]:
    with ScriptedS3({"a.bin": A, "b.bin": B}) as scripted:
        yield scripted


def scripted_client(server: ScriptedS3, policy: Policy = QUICK) -> S3Client:
    return S3Client(policy, endpoint_url=server.url, credentials=Credentials("AKIDEXAMPLE", "secret"))


# ------------------------------------------------------------------------------------------ the checksum values


@pytest.mark.parametrize("algorithm", [CRC32, CRC32C, CRC64NVME], ids=lambda a: a.name)
def test_part_crcs_combine_to_the_crc_of_the_whole_object(algorithm: Any) -> None:
    """The full-object CRC of a multipart upload comes from its parts' CRCs and lengths (parts recorded in any
    order, a retried part replacing its first record), never from a second pass over the bytes."""
    parts = [random.Random(n).randbytes(size) for n, size in enumerate([5 * MiB, 5 * MiB, 12_345], start=1)]
    record = PartChecksums(algorithm)
    for number in (3, 1, 2):
        record.add(number, b"a first attempt of this part" if number == 2 else parts[number - 1])
    record.add(2, memoryview(parts[1]))
    whole = b"".join(parts)
    assert record.full_object([1, 2, 3]) == algorithm.value(whole) == algorithm.value_of(parts)
    assert record.full_object([1, 2, 4]) is None  # a part this client never uploaded: nothing to combine


def test_only_a_full_object_checksum_that_decodes_is_checked() -> None:
    """A composite checksum (``<value>-<parts>``, or typed COMPOSITE) is a checksum of checksums: no body has it."""
    value = crc64nvme(A)
    assert stated_checksum({"x-amz-checksum-crc64nvme": value}).covers_object  # type: ignore[union-attr]
    assert stated_checksum({"x-amz-checksum-crc64nvme": value}).matches(A[:5000], A[5000:])  # type: ignore[union-attr]
    assert not StoredChecksum(CRC64NVME, value, COMPOSITE).covers_object
    assert not StoredChecksum(CRC32, "AAAAAA==-3").covers_object
    assert not StoredChecksum(CRC64NVME, "not base64 at all").covers_object
    assert stated_checksum({"etag": '"x"'}) is None


def test_checksums_mode_from_keyword_mapping_environment_and_command_line() -> None:
    assert Policy().checksums == "when_supported"
    assert Policy(checksums="when_required").checksums == "required"  # botocore's spelling
    assert Policy.from_mapping({"Checksums": "OFF"}).checksums == "off"
    assert Policy.from_env({"S3IO_CHECKSUMS": "required"}).checksums == "required"
    with pytest.raises(errors.InvalidConfig, match="S3IO_CHECKSUMS: expected one of when_supported, required, off"):
        Policy.from_env({"S3IO_CHECKSUMS": "always"})
    cli = subprocess.run(
        [sys.executable, "-m", "s3io", "stat", "s3://bucket/key", "--checksums", "sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode != 0 and "checksums: expected one of when_supported, required, off" in cli.stderr


# ------------------------------------------------------------------------------------------ against moto


def test_a_put_carries_a_crc64nvme_that_the_store_keeps(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    """Through the strict SigV4 front: the checksum header is signed, and what the store then reports to a HEAD
    with checksum mode is the CRC64NVME of the bytes, computed here without s3io."""
    data = random.Random(5).randbytes(3000)

    async def main() -> None:
        async with S3Client(QUICK, endpoint_url=s3_endpoint.url) as s3:
            put = await s3.put_object(bucket, "put.bin", data)
            assert put.checksum == StoredChecksum(CRC64NVME, crc64nvme(data), "FULL_OBJECT")  # for a journal entry
            await s3.put_object(bucket, "empty.bin", b"")
            assert (await s3.object_checksum(bucket, "put.bin")) == StoredChecksum(CRC64NVME, crc64nvme(data))
            assert (await s3.get_object(bucket, "put.bin")).data == data

    run(main())
    for key, body in (("put.bin", data), ("empty.bin", b"")):
        head = s3_client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert head["ChecksumCRC64NVME"] == crc64nvme(body)


def test_a_multipart_upload_is_sealed_with_the_crc_of_the_whole_object(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """Three parts uploaded in parallel, each with its CRC; completion states the whole object's CRC64NVME, combined
    from the parts' (type FULL_OBJECT); a large read of it in parts is checked against it (one HEAD)."""
    data = random.Random(6).randbytes(2 * 5 * MiB + 12_345)

    async def main() -> None:
        async with S3Client(QUICK, endpoint_url=s3_endpoint.url) as s3:
            async with s3.multipart_writer(bucket, "multi.bin", part_size=5 * MiB) as writer:
                await writer.write(data)
            assert writer.result.checksum == StoredChecksum(CRC64NVME, crc64nvme(data), "FULL_OBJECT")
            engine = RangeEngine(s3, EngineConfig(part_size=4 * MiB))
            before = s3.stats()
            assert await engine.fetch_object(ObjectInfo(bucket, "multi.bin", len(data))) == data
            delta = s3.stats() - before
            assert delta.requests_for("get") == 3 and delta.requests_for("head") == 1

    run(main())
    head = s3_client.head_object(Bucket=bucket, Key="multi.bin", ChecksumMode="ENABLED")
    assert head["ChecksumType"] == "FULL_OBJECT" and head["ChecksumCRC64NVME"] == crc64nvme(data)


def test_bytes_without_the_checksum_their_store_states_are_never_returned(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """moto keeps whatever checksum a writer states: an object whose stored CRC its bytes lack reads as
    ChecksumMismatch naming it, after the policy's attempts, from the client and from the engine, small or large;
    with checksums=required (botocore's when_required) the same bytes are read unchecked, as before."""
    data = random.Random(7).randbytes(5 * MiB)
    for key in ("small.bin", "large.bin"):
        body = data[:1000] if key == "small.bin" else data
        s3_client.put_object(
            Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="CRC64NVME", ChecksumCRC64NVME=crc64nvme(b"x")
        )

    async def main() -> None:
        async with S3Client(QUICK, endpoint_url=s3_endpoint.url) as s3:
            with pytest.raises(errors.ChecksumMismatch, match=r"small\.bin") as caught:
                await s3.get_object(bucket, "small.bin")
            assert caught.value.attempts == 3 and s3.stats().retries == {"integrity": 2}
            engine = RangeEngine(s3, EngineConfig(part_size=2 * MiB))
            for key, size in (("small.bin", 1000), ("large.bin", len(data))):
                with pytest.raises(errors.ChecksumMismatch, match=key):
                    await engine.fetch_object(ObjectInfo(bucket, key, size))
        async with S3Client(QUICK.replace(checksums="required"), endpoint_url=s3_endpoint.url) as s3:
            assert (await s3.get_object(bucket, "small.bin")).data == data[:1000]
            assert (
                await RangeEngine(s3, EngineConfig(part_size=2 * MiB)).fetch_object(
                    ObjectInfo(bucket, "large.bin", len(data))
                )
                == data
            )

    run(main())


# ------------------------------------------------------------------------------------------ a server that swaps bodies


def swapping(times: int | None, *, ranged: bool = False) -> Callable[[Request], Reply | None]:
    """A script answering GETs of a.bin with b.bin's bytes under a.bin's own headers (ETag, length, Content-Range,
    its checksum when asked), the first ``times`` times (None: always); whole GETs, or ranged ones."""
    swapped: list[int] = []

    def script(request: Request) -> Reply | None:
        if request.method != "GET" or request.key != "a.bin" or bool(request.range) != ranged:
            return None
        if times is not None and len(swapped) >= times:
            return None
        swapped.append(request.seq)
        headers = {"ETag": etag_of(A)}
        if not request.range:
            if request.headers.get("x-amz-checksum-mode") == "ENABLED":
                headers.update(checksum_headers(A))
            return Reply(200, headers, B)
        first, last = (int(x) for x in request.range.removeprefix("bytes=").split("-"))
        headers["Content-Range"] = f"bytes {first}-{last}/{SIZE}"
        return Reply(206, headers, B[first : last + 1])

    return script


def test_a_whole_read_answered_with_another_objects_bytes_is_retried_then_refused_naming_it(
    server: ScriptedS3,
) -> None:
    server.script = swapping(None)

    async def main() -> None:
        async with scripted_client(server) as s3:
            with pytest.raises(errors.ChecksumMismatch) as caught:
                await s3.get_object("bucket", "a.bin")
            assert caught.value.url == "s3://bucket/a.bin" and caught.value.attempts == 3
            assert "not returned" in str(caught.value) and "CRC64NVME" in str(caught.value)

    run(main())
    gets = [r for r in server.requests if r.method == "GET"]
    assert len(gets) == 3 and all(r.headers.get("x-amz-checksum-mode") == "ENABLED" for r in gets)
    assert all(r.headers.get("if-match") == etag_of(A) for r in gets[1:])  # read again from the same version


def test_one_swapped_answer_is_read_again_and_the_right_bytes_returned(server: ScriptedS3) -> None:
    server.script = swapping(1)

    async def main() -> None:
        async with scripted_client(server) as s3:
            assert (await s3.get_object("bucket", "a.bin")).data == A
            engine = RangeEngine(s3, EngineConfig())
            server.script = swapping(1)
            assert await engine.fetch_object(ObjectInfo("bucket", "a.bin", SIZE)) == A  # a small file: one GET
            assert s3.stats().retries == {"integrity": 2}

    run(main())


def test_a_ranged_read_answered_with_another_objects_bytes_is_not_caught(server: ScriptedS3) -> None:
    """The documented limit (docs/integrity.md): no checksum S3 keeps covers an arbitrary range, so a range of
    another object's bytes under this object's headers is returned as this object's. This test pins that, so a
    change that starts catching it updates the page."""
    server.script = swapping(None, ranged=True)

    async def main() -> None:
        async with scripted_client(server) as s3:
            result = await s3.get_range("bucket", "a.bin", GetRange.bounded(100, 200))
            assert bytes(result.data) == B[100:200] != A[100:200]
            engine = RangeEngine(s3, EngineConfig(whole_object_threshold=1000))
            assert await engine.fetch_ranges(ObjectInfo("bucket", "a.bin", SIZE), [(0, 50)]) == [B[:50]]

    run(main())
    assert all(r.headers.get("x-amz-checksum-mode") is None for r in server.requests)  # not asked: S3 states none


def test_a_large_read_with_a_swapped_part_is_read_again_then_refused(server: ScriptedS3) -> None:
    """A large object read whole in parts: one part of another object's bytes under the right headers fails the
    full-object checksum (one HEAD); the object is read again (every part), and after FULL_READ_ATTEMPTS reads
    ChecksumMismatch names it. A part swapped once costs one more read and returns the right bytes."""
    server.script = swapping(None, ranged=True)

    async def main(config: EngineConfig) -> bytes:
        async with scripted_client(server) as s3:
            return await RangeEngine(s3, config).fetch_object(ObjectInfo("bucket", "a.bin", SIZE))

    config = EngineConfig(part_size=4096, cache_bytes=MiB)
    with pytest.raises(errors.ChecksumMismatch, match="read in parts") as caught:
        run(main(config))
    assert caught.value.url == "s3://bucket/a.bin" and caught.value.attempts == 3
    assert server.count("GET") == 3 * 3 and server.count("HEAD") == 3
    server.requests.clear()
    server.script = swapping(1, ranged=True)
    assert run(main(config)) == A
    assert server.count("GET") == 2 * 3 and server.count("HEAD") == 2


# ------------------------------------------------------------------------------------------ stores that refuse them


def multipart_store(server: ScriptedS3, refuse: Callable[[Request], bool]) -> list[Request]:
    """Scripts PUT and the multipart calls on ``server`` (refused with 400 InvalidArgument where ``refuse``); returns
    the list the upload requests are appended to."""
    seen: list[Request] = []

    def script(request: Request) -> Reply | None:
        if request.method not in ("PUT", "POST"):
            return None
        seen.append(request)
        if refuse(request):
            return error_reply(400, "InvalidArgument", "Unsupported header received for this API call")
        if request.method == "PUT":
            return Reply(200, {"ETag": etag_of(request.body)})
        if "uploads" in request.query:
            body = "<InitiateMultipartUploadResult><UploadId>up-1</UploadId></InitiateMultipartUploadResult>"
            return Reply(200, {}, body.encode())
        body = f"<CompleteMultipartUploadResult><ETag>{etag_of(b'done')}</ETag></CompleteMultipartUploadResult>"
        return Reply(200, {}, body.encode())

    server.script = script
    return seen


def test_a_store_refusing_checksum_headers_is_learnt_once_and_uploads_go_on_with_content_md5(
    server: ScriptedS3, caplog: pytest.LogCaptureFixture
) -> None:
    seen = multipart_store(server, lambda request: any(h.startswith("x-amz-checksum") for h in request.headers))

    async def main() -> None:
        async with scripted_client(server) as s3:
            await s3.put_object("bucket", "one.bin", b"first")
            await s3.put_object("bucket", "two.bin", b"second")
            async with s3.multipart_writer("bucket", "multi.bin", part_size=5 * MiB) as writer:
                await writer.write(bytes(6 * MiB))

    with caplog.at_level(logging.WARNING, logger="s3io"):
        run(main())
    assert [(r.method, r.key, "x-amz-checksum-crc64nvme" in r.headers) for r in seen[:3]] == [
        ("PUT", "one.bin", True),  # refused
        ("PUT", "one.bin", False),  # the same without it: accepted, so the header was the cause
        ("PUT", "two.bin", False),  # learnt: never sent again to this endpoint
    ]
    assert all("content-md5" in r.headers for r in seen[1:3])
    creates = [r for r in seen if "uploads" in r.query]
    assert [r.headers.get("x-amz-checksum-type") for r in creates] == ["FULL_OBJECT", None]
    parts = [r for r in seen if "partNumber" in r.query]
    assert len(parts) == 2 and all(
        "content-md5" in r.headers and "x-amz-checksum-crc64nvme" not in r.headers for r in parts
    )
    refusals = [r.getMessage() for r in caplog.records if "refuses" in r.getMessage()]
    assert len(refusals) == 2 and Feature.UPLOAD_CHECKSUMS.value in refusals[0]
    assert Feature.FULL_OBJECT_MULTIPART.value in refusals[1] and "InvalidArgument" in refusals[1]


def test_a_refusal_that_is_not_about_the_headers_is_the_error(server: ScriptedS3) -> None:
    """A 400 that the request without checksum headers gets too is the caller's error, and nothing is learnt."""
    multipart_store(server, lambda request: True)

    async def main() -> None:
        async with scripted_client(server) as s3:
            with pytest.raises(errors.RequestError, match="InvalidArgument"):
                await s3.put_object("bucket", "one.bin", b"first")

    run(main())
    assert not REFUSALS.refused(f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}", Feature.UPLOAD_CHECKSUMS)


def test_multipart_parts_and_completion_state_their_crcs(server: ScriptedS3) -> None:
    """Each part carries its CRC64NVME (and no Content-MD5); completion names every part's CRC in its XML and states
    the whole object's, combined from them, as FULL_OBJECT."""
    seen = multipart_store(server, lambda request: False)
    data = random.Random(8).randbytes(11 * MiB)

    async def main() -> None:
        async with (
            scripted_client(server) as s3,
            s3.multipart_writer("bucket", "multi.bin", part_size=5 * MiB) as writer,
        ):
            await writer.write(data)

    run(main())
    parts = sorted((r for r in seen if "partNumber" in r.query), key=lambda r: int(r.query["partNumber"]))
    chunks = [data[i : i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]
    assert [r.headers["x-amz-checksum-crc64nvme"] for r in parts] == [crc64nvme(c) for c in chunks]
    assert not any("content-md5" in r.headers for r in parts)
    (complete,) = [r for r in seen if "uploadId" in r.query and "partNumber" not in r.query]
    assert complete.headers["x-amz-checksum-crc64nvme"] == crc64nvme(data)
    assert complete.headers["x-amz-checksum-type"] == "FULL_OBJECT"
    assert re.findall(rb"<ChecksumCRC64NVME>([^<]+)<", complete.body) == [crc64nvme(c).encode() for c in chunks]


@pytest.mark.parametrize(("mode", "md5"), [("required", True), ("off", False)])
def test_required_and_off_send_no_crc_and_ask_for_no_checksum(server: ScriptedS3, mode: str, md5: bool) -> None:
    seen = multipart_store(server, lambda request: False)
    results: list[PutResult] = []

    async def main() -> None:
        async with scripted_client(server, QUICK.replace(checksums=mode)) as s3:
            results.append(await s3.put_object("bucket", "one.bin", b"first"))
            assert (await s3.get_object("bucket", "a.bin")).data == A

    run(main())
    (put,) = seen
    assert not any(h.startswith("x-amz-checksum") or h == "x-amz-sdk-checksum-algorithm" for h in put.headers)
    assert ("content-md5" in put.headers) is md5
    assert all(r.checksum is None for r in results)
    assert all("x-amz-checksum-mode" not in r.headers for r in server.requests)


def test_an_upload_the_store_says_arrived_damaged_is_sent_again(server: ScriptedS3) -> None:
    """BadDigest: the bytes reached the store other than their checksum says: sent again, not refused."""
    told: list[int] = []

    def script(request: Request) -> Reply | None:
        if request.method != "PUT":
            return None
        told.append(request.seq)
        if len(told) == 1:
            return error_reply(400, "BadDigest", "The CRC64NVME you specified did not match the calculated checksum.")
        return Reply(200, {"ETag": etag_of(request.body)})

    server.script = script

    async def main() -> None:
        async with scripted_client(server) as s3:
            await s3.put_object("bucket", "one.bin", b"first")
            assert s3.stats().retries == {"integrity": 1}

    run(main())
    assert len(told) == 2


def test_a_store_refusing_the_full_object_checksum_at_completion_completes_without_it(server: ScriptedS3) -> None:
    """A store that takes the declaration and the parts' CRCs but refuses the completion's full-object CRC: the same
    completion without it (the parts' CRCs still in its XML) publishes the object; the next upload declares none."""

    def refuse(request: Request) -> bool:
        completing = "uploadId" in request.query and "partNumber" not in request.query
        return completing and "x-amz-checksum-type" in request.headers

    seen = multipart_store(server, refuse)

    async def main() -> None:
        async with scripted_client(server) as s3:
            for key in ("first.bin", "second.bin"):
                async with s3.multipart_writer("bucket", key, part_size=5 * MiB) as writer:
                    await writer.write(bytes(6 * MiB))
                assert writer.result.checksum is None

    run(main())
    completions = [r for r in seen if "uploadId" in r.query and "partNumber" not in r.query and r.method == "POST"]
    assert [(r.key, "x-amz-checksum-type" in r.headers, b"<ChecksumCRC64NVME>" in r.body) for r in completions] == [
        ("first.bin", True, True),
        ("first.bin", False, True),
        ("second.bin", False, False),
    ]
    creates = [r for r in seen if "uploads" in r.query]
    assert [r.headers.get("x-amz-checksum-type") for r in creates] == ["FULL_OBJECT", None]


def test_a_store_refusing_part_checksums_at_completion_completes_with_the_parts_etags_alone(
    server: ScriptedS3,
) -> None:
    """As Swift 2.30.1 does (measured there: 400 MalformedXML), a store refuses a CompleteMultipartUpload whose
    ``<Part>`` carries a ``<ChecksumCRC64NVME>``, with or without the full-object CRC; the same completion with the
    parts' numbers and ETags alone publishes the object. The fallback gets there (the upload is not left unfinished)
    and the next upload declares no checksum, so its completion carries none from the start."""

    def refuse(request: Request) -> bool:
        completing = "uploadId" in request.query and "partNumber" not in request.query
        return completing and b"<ChecksumCRC64NVME>" in request.body

    seen = multipart_store(server, refuse)

    async def main() -> None:
        async with scripted_client(server) as s3:
            for key in ("first.bin", "second.bin"):
                async with s3.multipart_writer("bucket", key, part_size=5 * MiB) as writer:
                    await writer.write(bytes(11 * MiB))
                assert writer.result.etag == etag_of(b"done") and writer.result.checksum is None

    run(main())
    completions = [r for r in seen if "uploadId" in r.query and "partNumber" not in r.query and r.method == "POST"]
    assert [(r.key, "x-amz-checksum-type" in r.headers, b"<ChecksumCRC64NVME>" in r.body) for r in completions] == [
        ("first.bin", True, True),  # refused
        ("first.bin", False, True),  # refused: the part checksums were the cause
        ("first.bin", False, False),  # accepted
        ("second.bin", False, False),  # learnt: declared without a checksum, completed without one
    ]
    assert [re.findall(rb"<PartNumber>(\d+)</PartNumber>", r.body) for r in completions[2:]] == [[b"1", b"2", b"3"]] * 2
    assert not any(r.method == "DELETE" for r in server.requests)  # no upload aborted
