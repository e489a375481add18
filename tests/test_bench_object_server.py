"""The benchmarks' in-memory S3 endpoint answers like S3: the figures judged against it are only worth as much
as its answers. Every operation is driven through s3io's S3Client and through boto3 (the peer oracle) over real
sockets; the boto3 tests run against moto too, where moto behaves as S3 documents, so the same assertions hold
for the endpoint and for the server it stands in for."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import io
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from s3io import Credentials, Policy, S3Client, errors
from testbed.memory_endpoint import MemoryEndpoint
from testbed.moto_server import boto3_client, empty_and_delete_bucket, unique_bucket_name

pytestmark = pytest.mark.timeout(120)

DATA = bytes(range(256)) * 8  # 2048 bytes
MiB = 1024 * 1024


def quoted_md5(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


@pytest.fixture(scope="module")
def server() -> Iterator[MemoryEndpoint]:
    """The one-object server cpu_per_get uses."""
    with MemoryEndpoint(seed=(DATA, "bench", "dir/object.bin")) as server:
        yield server


@pytest.fixture(scope="module")
def endpoint() -> Iterator[MemoryEndpoint]:
    """The bucket-level endpoint the many-object benchmarks use."""
    with MemoryEndpoint() as endpoint:
        yield endpoint


def s3io_client(url: str) -> S3Client:
    return S3Client(Policy(max_attempts=1), endpoint_url=url, credentials=Credentials("a", "b"), region="us-east-1")


@pytest.fixture
def bucket(endpoint: MemoryEndpoint) -> str:
    """A fresh bucket on the endpoint."""
    name = unique_bucket_name("bench")
    boto3_client(endpoint.url).create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["memory", "moto"])
def peer(request: pytest.FixtureRequest, endpoint: MemoryEndpoint) -> Iterator[tuple[Any, str]]:
    """(boto3 client, fresh bucket) on the endpoint, then on moto: the same assertions must hold on both."""
    url = endpoint.url if request.param == "memory" else request.getfixturevalue("s3_endpoint").url
    client = boto3_client(url)
    name = unique_bucket_name("bench")
    client.create_bucket(Bucket=name)
    yield client, name
    if request.param == "moto":  # the shared moto server: leave it as found
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix="ctl/"):
            for obj in page.get("Contents", []):  # moto's DeleteObjects cannot parse control characters
                client.delete_object(Bucket=name, Key=obj["Key"])
        empty_and_delete_bucket(client, name)


def error_of(call: Any) -> tuple[str, int]:
    """(error code, HTTP status) of a boto3 call expected to fail."""
    with pytest.raises(ClientError) as info:
        call()
    response = info.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


# ------------------------------------------------------------------------------------------- one object


async def test_whole_ranged_suffix_head_and_missing_keys_on_one_connection(server) -> None:
    server.reset()
    async with s3io_client(server.url) as s3:
        whole = await s3.get_object("bench", "dir/object.bin")
        assert (whole.data, whole.object_size) == (DATA, len(DATA))
        assert (await s3.get_object("bench", "dir/object.bin", 100, 300)).data == DATA[100:300]
        tail = await s3.get_object("bench", "dir/object.bin", -10)
        assert (tail.data, tail.start) == (DATA[-10:], len(DATA) - 10)
        info = await s3.head_object("bench", "dir/object.bin")
        assert (info.size, info.etag) == (len(DATA), whole.etag)
        with pytest.raises(errors.NotFound):
            await s3.get_object("bench", "other.bin")
    counts = server.counts()
    assert counts.total == 5
    assert (counts.kind("get"), counts.kind("whole_get"), counts.kind("ranged_get")) == (4, 2, 2)
    assert counts.kind("head") == 1 and counts.raw["statuses"] == {"200": 2, "206": 2, "404": 1}
    assert counts.raw["connections_opened"] == 1  # kept alive, like S3


async def test_a_range_past_the_end_is_416(server) -> None:
    async with s3io_client(server.url) as s3:
        with pytest.raises(errors.RequestError, match="status=416"):
            await s3.get_object("bench", "dir/object.bin", len(DATA) + 10, len(DATA) + 20)


# ------------------------------------------------------------------------------------------- through s3io


async def test_s3io_reads_whole_ranged_open_ended_and_suffix_and_heads_a_put_object(endpoint, bucket) -> None:
    async with s3io_client(endpoint.url) as s3:
        put = await s3.put_object(bucket, "a/b.bin", DATA, content_type="application/x-test")
        assert put.etag == quoted_md5(DATA)
        assert (await s3.get_object(bucket, "a/b.bin")).data == DATA
        assert (await s3.get_object(bucket, "a/b.bin", 10, 20)).data == DATA[10:20]
        assert (await s3.get_object(bucket, "a/b.bin", 2000)).data == DATA[2000:]
        assert (await s3.get_object(bucket, "a/b.bin", -5)).data == DATA[-5:]
        info = await s3.head_object(bucket, "a/b.bin")
        assert (info.size, info.etag) == (len(DATA), put.etag)
        assert info.last_modified is not None and abs(info.last_modified - time.time()) < 60
        with pytest.raises(errors.RequestError, match="status=416"):
            await s3.get_object(bucket, "a/b.bin", len(DATA), len(DATA) + 1)
        with pytest.raises(errors.NotFound):
            await s3.head_object(bucket, "a/missing.bin")
        with pytest.raises(errors.NotFound, match="NoSuchBucket"):
            await s3.get_object("no-such-bucket-here", "a/b.bin")


async def test_s3io_lists_2500_keys_in_pages_with_continuation_start_after_and_delimiter(endpoint, bucket) -> None:
    keys = sorted([f"d{i % 3}/k{i:05d}" for i in range(2400)] + [f"top{i:03d}" for i in range(100)])
    async with s3io_client(endpoint.url) as s3:
        limit = asyncio.Semaphore(16)

        async def put(key: str) -> None:
            async with limit:
                await s3.put_object(bucket, key, key.encode())

        await asyncio.gather(*(put(key) for key in reversed(keys)))  # out of order: the listing must sort
        endpoint.reset()
        listed = [obj async for obj in s3.list_objects(bucket)]
        assert [obj.key for obj in listed] == keys
        assert all(obj.size == len(obj.key) and obj.etag == quoted_md5(obj.key.encode()) for obj in listed)
        assert endpoint.counts().operation("ListObjectsV2") == 3  # 1000 + 1000 + 500

        first, _, token = await s3.list_page(bucket, max_keys=1000)
        assert token is not None and [o.key for o in first] == keys[:1000]
        second, _, _ = await s3.list_page(bucket, continuation_token=token, max_keys=1000)
        assert [o.key for o in second] == keys[1000:2000]

        after = [obj.key async for obj in s3.list_objects(bucket, "d1/", start_after="d1/k01000")]
        assert after == [k for k in keys if k.startswith("d1/") and k > "d1/k01000"]

        objects, prefixes, token = await s3.list_page(bucket, delimiter="/")
        assert (prefixes, [o.key for o in objects], token) == (["d0/", "d1/", "d2/"], keys[-100:], None)
        assert await s3.list_prefixes(bucket) == ["d0/", "d1/", "d2/"]
        # A page boundary inside the common prefixes: each prefix counts once, the next page resumes after it.
        objects, prefixes, token = await s3.list_page(bucket, delimiter="/", max_keys=2)
        assert (prefixes, objects) == (["d0/", "d1/"], []) and token is not None
        objects, prefixes, token = await s3.list_page(bucket, delimiter="/", max_keys=2, continuation_token=token)
        assert (prefixes, [o.key for o in objects]) == (["d2/"], ["top000"]) and token is not None


async def test_s3io_multipart_upload_completes_with_the_md5_of_part_md5s_as_etag(endpoint, bucket) -> None:
    part1, part2 = b"a" * (5 * MiB), b"tail bytes"
    expected = hashlib.md5(hashlib.md5(part1).digest() + hashlib.md5(part2).digest()).hexdigest() + "-2"
    async with s3io_client(endpoint.url) as s3:
        upload_id = await s3.create_multipart_upload(bucket, "mp/big.bin")
        abandoned = await s3.create_multipart_upload(bucket, "mp/abandoned.bin")
        etag1 = await s3.upload_part(bucket, "mp/big.bin", upload_id, 1, part1)
        etag2 = await s3.upload_part(bucket, "mp/big.bin", upload_id, 2, part2)
        assert (etag1, etag2) == (quoted_md5(part1), quoted_md5(part2))
        uploads = [u async for u in s3.list_multipart_uploads(bucket, "mp/")]
        assert sorted((u.key, u.upload_id) for u in uploads) == sorted(
            [("mp/big.bin", upload_id), ("mp/abandoned.bin", abandoned)]
        )
        with pytest.raises(errors.RequestError, match="InvalidPart"):
            await s3.complete_multipart_upload(bucket, "mp/big.bin", upload_id, [(1, etag2), (2, etag2)])
        done = await s3.complete_multipart_upload(bucket, "mp/big.bin", upload_id, [(1, etag1), (2, etag2)])
        assert done.etag == f'"{expected}"'
        assert (await s3.head_object(bucket, "mp/big.bin")).etag == f'"{expected}"'
        assert (await s3.get_object(bucket, "mp/big.bin", 5 * MiB - 2)).data == b"aa" + part2
        await s3.abort_multipart_upload(bucket, "mp/abandoned.bin", abandoned)
        assert [u async for u in s3.list_multipart_uploads(bucket, "mp/")] == []
        async with s3.multipart_writer(bucket, "mp/written.bin", part_size=5 * MiB) as writer:
            await writer.write(part1 + part2)
        assert (await s3.get_object(bucket, "mp/written.bin")).data == part1 + part2


async def test_s3io_conditional_put_and_delete_answer_412_and_404(endpoint, bucket) -> None:
    async with s3io_client(endpoint.url) as s3:
        first = await s3.put_object(bucket, "lock", b"one", if_none_match=True)
        with pytest.raises(errors.PreconditionFailed):
            await s3.put_object(bucket, "lock", b"two", if_none_match=True)
        with pytest.raises(errors.PreconditionFailed):
            await s3.put_object(bucket, "lock", b"two", if_match='"0123456789abcdef0123456789abcdef"')
        with pytest.raises(errors.NotFound):
            await s3.put_object(bucket, "absent", b"two", if_match=first.etag)
        second = await s3.put_object(bucket, "lock", b"two", if_match=first.etag)
        assert (await s3.get_object(bucket, "lock")).data == b"two"
        with pytest.raises(errors.PreconditionFailed):
            await s3.head_object(bucket, "lock", if_match=first.etag)
        with pytest.raises(errors.ObjectChanged):
            await s3.get_object(bucket, "lock", if_match=first.etag)
        with pytest.raises(errors.PreconditionFailed):
            await s3.delete_object(bucket, "lock", if_match=first.etag)
        await s3.delete_object(bucket, "lock", if_match=second.etag)
        with pytest.raises(errors.NotFound):
            await s3.delete_object(bucket, "lock", if_match=second.etag)
        await s3.delete_object(bucket, "lock")  # unconditional: absent is not an error


async def test_s3io_copy_object_pins_the_source_with_if_match(endpoint, bucket) -> None:
    async with s3io_client(endpoint.url) as s3:
        source = await s3.put_object(bucket, "src/a b&c.bin", DATA)
        copied = await s3.copy_object(bucket, "src/a b&c.bin", bucket, "dst/copy.bin", if_match=source.etag)
        assert copied.etag == source.etag
        assert (await s3.get_object(bucket, "dst/copy.bin")).data == DATA
        with pytest.raises(errors.PreconditionFailed):
            await s3.copy_object(bucket, "src/a b&c.bin", bucket, "dst/other.bin", if_match='"ffff"')
        with pytest.raises(errors.NotFound):
            await s3.copy_object(bucket, "src/missing", bucket, "dst/other.bin")


async def test_s3io_delete_objects_in_batches_and_create_bucket_twice(endpoint, bucket) -> None:
    keys = [f"gone/{i:04d}" for i in range(1200)]
    async with s3io_client(endpoint.url) as s3:
        await s3.create_bucket(bucket)  # ours already: not an error
        await asyncio.gather(*(s3.put_object(bucket, key, b"x") for key in keys[:50]))
        endpoint.reset()
        result = await s3.delete_objects(bucket, keys)
        assert sorted(result.deleted) == keys and result.errors == ()  # absent keys count as deleted, as in S3
        assert endpoint.counts().operation("DeleteObjects") == 2
        assert [obj async for obj in s3.list_objects(bucket)] == []


# ------------------------------------------------------------------------------------------- through boto3


def test_boto3_paginates_1100_keys_and_groups_delimiter_prefixes(peer) -> None:
    s3, name = peer
    keys = [f"p{i % 4}/{i:04d}.bin" for i in range(1096)] + ["x.bin", "y.bin", "z/1", "z/2"]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=name, Key=key, Body=b"."), keys))
    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=name))
    assert [len(page.get("Contents", [])) for page in pages] == [1000, 100]
    assert pages[0]["IsTruncated"] and "NextContinuationToken" in pages[0] and pages[0]["KeyCount"] == 1000
    assert [obj["Key"] for page in pages for obj in page["Contents"]] == sorted(keys)
    small = list(
        s3.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix="p1/", PaginationConfig={"PageSize": 100})
    )
    assert [len(page["Contents"]) for page in small] == [100, 100, 74]
    top = s3.list_objects_v2(Bucket=name, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["p0/", "p1/", "p2/", "p3/", "z/"]
    assert [obj["Key"] for obj in top["Contents"]] == ["x.bin", "y.bin"] and top["KeyCount"] == 7
    after = s3.list_objects_v2(Bucket=name, StartAfter="p3/1090.bin", Prefix="p3/")
    assert [obj["Key"] for obj in after["Contents"]] == ["p3/1091.bin", "p3/1095.bin"]


CONTROL_KEYS = ["ctl/a\x01b", "ctl/tab\there", "ctl/with space+plus", "ctl/amp&<lt>'q\"", "ctl/ünï©ødé/x"]


def test_boto3_encoding_type_url_round_trips_control_characters(peer) -> None:
    s3, name = peer
    for key in CONTROL_KEYS:
        s3.put_object(Bucket=name, Key=key, Body=key.encode())
    listing = s3.list_objects_v2(Bucket=name, Prefix="ctl/")  # botocore asks for encoding-type=url and decodes
    assert listing["EncodingType"] == "url"
    assert [obj["Key"] for obj in listing["Contents"]] == sorted(CONTROL_KEYS)
    nested = s3.list_objects_v2(Bucket=name, Prefix="ctl/ü", Delimiter="/")
    assert [p["Prefix"] for p in nested["CommonPrefixes"]] == ["ctl/ünï©ødé/"]
    for key in CONTROL_KEYS:
        assert s3.get_object(Bucket=name, Key=key)["Body"].read() == key.encode()


def test_encoding_type_url_percent_encodes_keys_and_plain_xml_escapes_them(endpoint, bucket) -> None:
    """S3's two forms of a key with a control character: ``%01`` (url) or ``&#x1;``, which XML 1.0 rejects."""
    boto3_client(endpoint.url).put_object(Bucket=bucket, Key="ctl/a\x01b c", Body=b"1")
    host = urlsplit(endpoint.url).netloc
    connection = http.client.HTTPConnection(host, timeout=10)
    connection.request("GET", f"/{bucket}?list-type=2&encoding-type=url")
    encoded = connection.getresponse().read()
    connection.request("GET", f"/{bucket}?list-type=2")
    plain = connection.getresponse().read()
    connection.close()
    assert b"<Key>ctl/a%01b+c</Key>" in encoded and b"<EncodingType>url</EncodingType>" in encoded
    assert b"<Key>ctl/a&#x1;b c</Key>" in plain
    with pytest.raises(ET.ParseError):
        ET.fromstring(plain)


def test_boto3_multipart_complete_etag_is_md5_of_part_md5s_dash_n(peer) -> None:
    s3, name = peer
    parts = [b"x" * (5 * MiB), b"y" * (5 * MiB), b"z" * 123]
    upload_id = s3.create_multipart_upload(Bucket=name, Key="big.bin")["UploadId"]
    etags = [
        s3.upload_part(Bucket=name, Key="big.bin", UploadId=upload_id, PartNumber=n, Body=part)["ETag"]
        for n, part in enumerate(parts, 1)
    ]
    listed = s3.list_multipart_uploads(Bucket=name)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("big.bin", upload_id)]
    done = s3.complete_multipart_upload(
        Bucket=name,
        Key="big.bin",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)]},
    )
    expected = hashlib.md5(b"".join(hashlib.md5(part).digest() for part in parts)).hexdigest()
    assert done["ETag"] == f'"{expected}-3"'
    head = s3.head_object(Bucket=name, Key="big.bin")
    assert (head["ETag"], head["ContentLength"]) == (f'"{expected}-3"', 10 * MiB + 123)
    assert error_of(lambda: s3.abort_multipart_upload(Bucket=name, Key="big.bin", UploadId=upload_id)) == (
        "NoSuchUpload",
        404,
    )
    small = s3.create_multipart_upload(Bucket=name, Key="small.bin")["UploadId"]
    small_etags = [
        s3.upload_part(Bucket=name, Key="small.bin", UploadId=small, PartNumber=n, Body=b"s" * 10)["ETag"]
        for n in (1, 2)
    ]
    too_small = {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in zip((1, 2), small_etags, strict=True)]}
    call = lambda: s3.complete_multipart_upload(  # noqa: E731
        Bucket=name, Key="small.bin", UploadId=small, MultipartUpload=too_small
    )
    assert error_of(call) == ("EntityTooSmall", 400)
    s3.abort_multipart_upload(Bucket=name, Key="small.bin", UploadId=small)
    assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []


def test_boto3_conditional_requests_answer_412_304_and_404_like_s3(peer) -> None:
    s3, name = peer
    etag = s3.put_object(Bucket=name, Key="k", Body=b"hello")["ETag"]
    other = '"0123456789abcdef0123456789abcdef"'
    assert error_of(lambda: s3.put_object(Bucket=name, Key="k", Body=b"x", IfNoneMatch="*")) == (
        "PreconditionFailed",
        412,
    )
    assert error_of(lambda: s3.put_object(Bucket=name, Key="k", Body=b"x", IfMatch=other)) == (
        "PreconditionFailed",
        412,
    )
    assert error_of(lambda: s3.put_object(Bucket=name, Key="nokey", Body=b"x", IfMatch=other)) == ("NoSuchKey", 404)
    assert error_of(lambda: s3.get_object(Bucket=name, Key="k", IfMatch=other)) == ("PreconditionFailed", 412)
    assert error_of(lambda: s3.get_object(Bucket=name, Key="k", IfNoneMatch=etag)) == ("304", 304)
    assert error_of(lambda: s3.head_object(Bucket=name, Key="k", IfNoneMatch=etag)) == ("304", 304)
    assert error_of(lambda: s3.head_object(Bucket=name, Key="k", IfMatch=other)) == ("412", 412)
    assert s3.get_object(Bucket=name, Key="k", IfMatch=etag, IfNoneMatch=other)["Body"].read() == b"hello"
    assert error_of(lambda: s3.delete_object(Bucket=name, Key="k", IfMatch=other)) == ("PreconditionFailed", 412)
    assert error_of(lambda: s3.delete_object(Bucket=name, Key="nokey", IfMatch=other)) == ("NoSuchKey", 404)
    assert error_of(lambda: s3.get_object(Bucket=name, Key="k", Range="bytes=5-9")) == ("InvalidRange", 416)
    ranged = s3.get_object(Bucket=name, Key="k", Range="bytes=-3")
    assert (ranged["Body"].read(), ranged["ContentRange"]) == (b"llo", "bytes 2-4/5")
    assert s3.get_object(Bucket=name, Key="k", Range="bytes=x-y")["Body"].read() == b"hello"  # ignored, as S3 does
    s3.delete_object(Bucket=name, Key="k", IfMatch=etag)
    assert error_of(lambda: s3.get_object(Bucket=name, Key="k")) == ("NoSuchKey", 404)
    s3.put_object(Bucket=name, Key="k", Body=b"again", IfNoneMatch="*")


def test_boto3_copy_object_honours_copy_source_if_match(endpoint, bucket) -> None:
    """Endpoint only: moto 5.2 ignores x-amz-copy-source-if-match, which S3 answers with 412."""
    s3 = boto3_client(endpoint.url)
    etag = s3.put_object(Bucket=bucket, Key="src", Body=DATA, ContentType="text/x-test", Metadata={"m": "1"})["ETag"]
    result = s3.copy_object(
        Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"}, CopySourceIfMatch=etag
    )
    assert result["CopyObjectResult"]["ETag"] == etag
    copied = s3.get_object(Bucket=bucket, Key="dst")
    assert (copied["Body"].read(), copied["ContentType"], copied["Metadata"]) == (DATA, "text/x-test", {"m": "1"})
    copy = lambda **extra: s3.copy_object(Bucket=bucket, Key="dst2", CopySource=f"{bucket}/src", **extra)  # noqa: E731
    assert error_of(lambda: copy(CopySourceIfMatch='"ffff"')) == ("PreconditionFailed", 412)
    assert error_of(lambda: copy(CopySourceIfNoneMatch=etag)) == ("PreconditionFailed", 412)
    assert error_of(lambda: s3.copy_object(Bucket=bucket, Key="src", CopySource=f"{bucket}/src")) == (
        "InvalidRequest",
        400,
    )


def test_boto3_delete_objects_buckets_and_self_copy(peer) -> None:
    s3, name = peer
    for key in ("a", "b", "c"):
        s3.put_object(Bucket=name, Key=key, Body=key.encode())
    result = s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}, {"Key": "missing"}]})
    assert sorted(d["Key"] for d in result["Deleted"]) == ["a", "b", "missing"] and "Errors" not in result
    s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "c"}], "Quiet": True})
    assert s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket=name)
    assert error_of(lambda: s3.head_bucket(Bucket=unique_bucket_name("absent"))) == ("404", 404)
    assert error_of(lambda: s3.get_object(Bucket=unique_bucket_name("absent"), Key="k")) == ("NoSuchBucket", 404)
    s3.put_object(Bucket=name, Key="keep", Body=b"1")
    assert error_of(lambda: s3.delete_bucket(Bucket=name)) == ("BucketNotEmpty", 409)
    copied = s3.copy_object(Bucket=name, Key="copy", CopySource={"Bucket": name, "Key": "keep"})
    assert copied["CopyObjectResult"]["ETag"] == quoted_md5(b"1")


def test_delete_objects_honours_a_per_key_etag_and_quiet(endpoint, bucket) -> None:
    """Endpoint only (moto 5.2 ignores <ETag> and <Quiet> in DeleteObjects): a key whose ETag changed is kept
    and reported; a quiet answer lists only the errors."""
    s3 = boto3_client(endpoint.url)
    etag = s3.put_object(Bucket=bucket, Key="pinned", Body=b"1")["ETag"]
    s3.put_object(Bucket=bucket, Key="other", Body=b"2")
    result = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "pinned", "ETag": etag}, {"Key": "other", "ETag": '"ffff"'}]}
    )
    assert [d["Key"] for d in result["Deleted"]] == ["pinned"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("other", "PreconditionFailed")]
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "other"}], "Quiet": True})
    assert "Deleted" not in quiet and "Errors" not in quiet and s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# ------------------------------------------------------------------------------------------- the wire


def _raw(url: str, request: bytes, answers: int, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
    """Send raw bytes on one connection; read `answers` responses (head, body) framed by Content-Length."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request)
        buffer = b""
        out = []
        while len(out) < answers:
            while b"\r\n\r\n" not in buffer:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed after {len(out)} answers"
                buffer += chunk
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(buffer) < length:
                chunk = sock.recv(65536)
                assert chunk, "connection closed inside a body"
                buffer += chunk
            out.append((head, buffer[:length]))
            buffer = buffer[length:]
        return out


def test_answers_carry_s3_headers_and_xml_error_bodies(endpoint, bucket) -> None:
    boto3_client(endpoint.url).put_object(Bucket=bucket, Key="k", Body=DATA)
    connection = http.client.HTTPConnection(urlsplit(endpoint.url).netloc, timeout=10)
    connection.request("GET", f"/{bucket}/k")
    ok = connection.getresponse()
    assert ok.read() == DATA
    connection.request("GET", f"/{bucket}/missing%20key")
    missing = connection.getresponse()
    error = ET.fromstring(missing.read())
    connection.close()
    assert ok.getheader("ETag") == quoted_md5(DATA) and ok.getheader("Accept-Ranges") == "bytes"
    assert abs(parsedate_to_datetime(ok.getheader("Date")).timestamp() - time.time()) < 60
    assert abs(parsedate_to_datetime(ok.getheader("Last-Modified")).timestamp() - time.time()) < 60
    assert ok.getheader("Server") == "AmazonS3" and ok.getheader("x-amz-id-2")
    assert ok.getheader("x-amz-request-id") != missing.getheader("x-amz-request-id")
    assert missing.status == 404 and missing.getheader("Content-Type") == "application/xml"
    assert (error.tag, error.findtext("Code"), error.findtext("Key")) == ("Error", "NoSuchKey", "missing key")
    assert error.findtext("RequestId") == missing.getheader("x-amz-request-id")


def test_chunked_and_100_continue_bodies_and_pipelined_answers_keep_their_order(endpoint, bucket) -> None:
    """A chunked PUT, an ``Expect: 100-continue`` PUT and a GET sent back to back on one connection to a port that
    waits 50 ms per answer: the answers come in request order, each after its wait (a lower bound only)."""
    url = endpoint.url_for(0.05)
    host = urlsplit(url).netloc
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    body = b"second body"
    request = (
        f"PUT /{bucket}/chunked HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + chunked
        + f"PUT /{bucket}/expect HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\n"
        f"Content-MD5: {base64.b64encode(hashlib.md5(body).digest()).decode()}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
        + f"GET /{bucket}/chunked HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    )
    started = time.monotonic()
    answers = _raw(url, request, 4)
    elapsed = time.monotonic() - started
    statuses = [head.split(b"\r\n", 1)[0] for head, _ in answers]
    assert statuses == [b"HTTP/1.1 200 OK", b"HTTP/1.1 100 Continue", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]
    assert answers[3][1] == b"hello world" and elapsed >= 0.05
    assert boto3_client(endpoint.url).get_object(Bucket=bucket, Key="expect")["Body"].read() == body


def test_a_wrong_content_md5_is_bad_digest_and_nothing_is_stored(endpoint, bucket) -> None:
    s3 = boto3_client(endpoint.url)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"data", ContentMD5=wrong)) == ("BadDigest", 400)
    assert error_of(lambda: s3.head_object(Bucket=bucket, Key="k")) == ("404", 404)


def test_request_counts_by_operation_through_the_control_pipe(endpoint, bucket) -> None:
    s3 = boto3_client(endpoint.url)
    endpoint.reset()
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-0")
    s3.head_object(Bucket=bucket, Key="k")
    s3.list_objects_v2(Bucket=bucket)
    s3.copy_object(Bucket=bucket, Key="k2", CopySource=f"{bucket}/k")
    s3.delete_object(Bucket=bucket, Key="k")
    counts = endpoint.counts()
    assert counts.raw["operations"] == {
        "PutObject": 1,
        "GetObject": 1,
        "HeadObject": 1,
        "ListObjectsV2": 1,
        "CopyObject": 1,
        "DeleteObject": 1,
    }
    assert (counts.total, counts.kind("get"), counts.kind("ranged_get"), counts.kind("list")) == (6, 1, 1, 1)
    assert counts.raw["statuses"] == {"200": 4, "206": 1, "204": 1}


def test_an_operation_it_lacks_answers_501_naming_it(endpoint, bucket) -> None:
    s3 = boto3_client(endpoint.url)
    assert error_of(lambda: s3.get_bucket_versioning(Bucket=bucket)) == ("NotImplemented", 501)
    assert error_of(lambda: s3.list_objects(Bucket=bucket)) == ("NotImplemented", 501)


# ------------------------------------------------------------------------------------------- benchmarks' needs


def test_compaction_runs_in_process_against_the_endpoint(endpoint, bucket) -> None:
    """What the compaction benchmark asks of the endpoint: the job finishes, the data reads back whole."""
    import s3io
    import spark_ext

    s3 = boto3_client(endpoint.url)
    rows = 0
    for i in range(12):
        table = pa.table({"id": pa.array(range(i * 100, i * 100 + 50), pa.int64())})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        s3.put_object(Bucket=bucket, Key=f"landing/day=1/part-{i:02d}.parquet", Body=sink.getvalue())
        rows += table.num_rows
    credentials = s3io.Credentials("a", "b")
    endpoint.reset()
    report = spark_ext.compact(
        None,
        f"s3://{bucket}/landing/",
        endpoint_url=endpoint.url,
        region="us-east-1",
        credentials=credentials,
        min_input_files=2,
        grace_period=0.0,
    )
    counts = endpoint.counts()
    assert report.files_before == 12 and report.files_after == 1 and report.rows_rewritten == rows
    # 412 and 416: the store probe's conditional writes and its range past the end (s3io.s3.probe)
    assert set(counts.raw["statuses"]) <= {"200", "204", "206", "404", "412", "416"}, counts.raw
    table = s3io.read_parquet(f"s3://{bucket}/landing/", endpoint_url=endpoint.url, credentials=credentials)
    assert sorted(table.column("id").to_pylist()) == sorted(i * 100 + j for i in range(12) for j in range(50))
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="landing/")["Contents"]
    data = [o for o in listed if not o["Key"].endswith("/LOCK")]  # the lock stays, released (s3io.table.lock)
    assert len(data) == 1 and s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_an_unknown_benchmark_server_is_named_with_the_known_ones() -> None:
    from benchmarks.infra import Stack
    from benchmarks.servers import servers

    stack = Stack()  # nothing starts until a server is asked for

    assert [server.name for server in servers(stack, ("memory", "moto"))] == ["moto", "memory"]
    with pytest.raises(ValueError, match=r"unknown server\(s\) \['minio'\]; expected some of \('moto', 'memory'\)"):
        servers(stack, ("minio",))


async def test_delete_objects_with_etags_is_conditional_per_object(endpoint: MemoryEndpoint, bucket: str) -> None:
    """s3io's DeleteObjects with per-object ETags on a store that honours them (S3 does): the object whose ETag
    matches goes, the other is kept and reported as PreconditionFailed."""
    boto = boto3_client(endpoint.url)
    boto.put_object(Bucket=bucket, Key="a", Body=b"a")
    boto.put_object(Bucket=bucket, Key="b", Body=b"b")
    async with s3io_client(endpoint.url) as s3:
        result = await s3.delete_objects(bucket, ["a", "b"], etags={"a": quoted_md5(b"a"), "b": quoted_md5(b"other")})
    assert list(result.deleted) == ["a"] and [(e.key, e.code) for e in result.errors] == [("b", "PreconditionFailed")]
    assert [o["Key"] for o in boto.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["b"]


async def test_compaction_deletes_its_inputs_in_one_conditional_delete_objects_where_the_store_honours_it(
    endpoint: MemoryEndpoint, bucket: str
) -> None:
    from test_compact_support import TEST_OPTIONS, plain_table, same_rows, write_landing_zone

    from s3io.compaction import compact_prefix

    boto = boto3_client(endpoint.url)
    original = write_landing_zone(boto, bucket, "zone/", {"d=1": 12})
    endpoint.reset()
    async with s3io_client(endpoint.url) as s3:
        report = await compact_prefix(s3, f"s3://{bucket}/zone/", TEST_OPTIONS)
    assert report.status == "ok", report.to_text()
    counts = endpoint.counts()
    assert counts.operation("DeleteObjects") == 3  # the probe's two, then all 12 inputs at once (each If-Match)
    # the probe's 5 (three conditional, its range and multipart scratch objects), staging, journal entry: 7 single
    # DELETEs in all, fewer than the 12 inputs alone would take (the lock is released by a PUT, not deleted)
    assert counts.operation("DeleteObject") == 7
    assert same_rows(plain_table(boto, bucket, "zone/"), original)
