"""Server-side encryption and requester pays on every request the S3Client makes, against moto behind the strict
front (testbed/s3_security.py evaluates bucket policies on encryption, SSE-C and requester pays as S3 does).

boto3 is the oracle: what s3io writes, boto3 HEADs (the encryption S3 recorded) and reads with the same settings.
"""

from __future__ import annotations

import base64
import logging
import os
import pickle
from typing import Any

import pytest

from s3io import Policy, errors
from s3io.s3.checksums import StoredChecksum
from s3io.s3.encryption import Encryption
from s3io.store import StoreConfig
from s3io.transport.transport import MockResponse, MockTransport
from testbed.s3_security import deny_unencrypted_policy

pytestmark = pytest.mark.timeout(120)

KEY_BYTES = os.urandom(32)
CUSTOMER_KEY = base64.b64encode(KEY_BYTES).decode()
OTHER_KEY = base64.b64encode(os.urandom(32)).decode()
FAST = Policy(max_attempts=2, backoff_base=0.001, backoff_cap=0.01)
PART = 5 * 1024 * 1024
BODY = bytes(range(256)) * 4096  # 1 MiB


def _store(endpoint: str, **settings: Any) -> StoreConfig:
    return StoreConfig.from_kwargs(endpoint_url=endpoint, policy=FAST, **settings)


SSE_C_ARGS = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": KEY_BYTES}  # boto3's: it adds the MD5


async def _write_every_way(client: Any, bucket: str) -> None:
    """A PUT, a multipart upload (two parts) and a copy: every kind of write the project makes."""
    await client.put_object(bucket, "put.bin", BODY)
    upload = await client.create_multipart_upload(bucket, "multipart.bin")
    parts = [
        (1, await client.upload_part(bucket, "multipart.bin", upload, 1, BODY * 5)),
        (2, await client.upload_part(bucket, "multipart.bin", upload, 2, BODY)),
    ]
    await client.complete_multipart_upload(bucket, "multipart.bin", upload, parts)
    await client.copy_object(bucket, "put.bin", bucket, "copy.bin")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"sse": "AES256"}, {"ServerSideEncryption": "AES256"}),
        (
            {"sse": "SSE-KMS", "sse_kms_key_id": "alias/company-data", "sse_bucket_key": True},
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/company-data", "BucketKeyEnabled": True},
        ),
    ],
    ids=["sse-s3", "sse-kms"],
)
async def test_every_write_carries_the_encryption_and_head_shows_it(
    s3_endpoint: Any, bucket: str, s3_client: Any, settings: dict[str, Any], expected: dict[str, Any]
) -> None:
    async with _store(s3_endpoint.url, **settings).client() as client:
        await _write_every_way(client, bucket)
        assert (await client.get_object(bucket, "multipart.bin", 0, 10)).data == BODY[:10]
    for key in ("put.bin", "multipart.bin", "copy.bin"):
        head = s3_client.head_object(Bucket=bucket, Key=key)
        wanted = dict(expected)
        if key == "multipart.bin":  # moto keeps no bucket key for a multipart upload (nor for boto3's)
            wanted.pop("BucketKeyEnabled", None)
        assert {name: head.get(name) for name in wanted} == wanted, key


async def test_a_policy_that_denies_unencrypted_writes_is_named_in_the_error_and_satisfied_by_sse_kms(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    s3_client.put_object(Bucket=bucket, Key="source.bin", Body=b"x", ServerSideEncryption="aws:kms")
    s3_client.put_bucket_policy(Bucket=bucket, Policy=deny_unencrypted_policy(bucket))
    async with _store(s3_endpoint.url).client() as plain:
        for write in (
            plain.put_object(bucket, "a.bin", b"data"),
            plain.create_multipart_upload(bucket, "b.bin"),
            plain.copy_object(bucket, "source.bin", bucket, "c.bin"),
        ):
            with pytest.raises(errors.AccessDenied) as refused:
                await write
            message = str(refused.value)
            assert "explicit deny in a resource-based policy" in message and refused.value.attempts == 1
            assert "asked for no server-side encryption" in message and "sse=aws:kms" in message
            assert "fs.s3a.encryption.algorithm" in message and "S3IO_SSE" in message
    async with _store(s3_endpoint.url, sse="SSE-S3").client() as wrong:
        with pytest.raises(errors.AccessDenied, match="asked for server-side encryption AES256"):
            await wrong.put_object(bucket, "a.bin", b"data")
    async with _store(s3_endpoint.url, sse="aws:kms").client() as encrypted:
        await _write_every_way(encrypted, bucket)
    assert s3_client.head_object(Bucket=bucket, Key="copy.bin")["ServerSideEncryption"] == "aws:kms"


async def test_sse_c_round_trips_through_every_read_and_write(tls_endpoint: Any, bucket: str, s3_client: Any) -> None:
    store = _store(tls_endpoint.url, sse_customer_key=KEY_BYTES, ca_bundle=tls_endpoint.ca_bundle)
    async with store.client() as client:
        await _write_every_way(client, bucket)
        for key, size in (("put.bin", len(BODY)), ("multipart.bin", 6 * len(BODY)), ("copy.bin", len(BODY))):
            assert (await client.head_object(bucket, key)).size == size
            assert (await client.get_object(bucket, key, 100, 110)).data == BODY[100:110]
            assert (await client.get_object(bucket, key, -5)).data == BODY[-5:]
        assert (await client.get_object(bucket, "put.bin")).data == BODY  # whole, checksum verified
        assert await client.object_checksum(bucket, "put.bin") is not None
    head = s3_client.head_object(Bucket=bucket, Key="multipart.bin", **SSE_C_ARGS)
    assert head["SSECustomerAlgorithm"] == "AES256"  # the oracle reads it with the same key
    assert s3_client.get_object(Bucket=bucket, Key="copy.bin", **SSE_C_ARGS)["Body"].read() == BODY

    async with _store(tls_endpoint.url, ca_bundle=tls_endpoint.ca_bundle).client() as keyless:
        with pytest.raises(errors.RequestError, match="stored using a form of Server Side Encryption"):
            await keyless.get_object(bucket, "put.bin", 0, 10)
        with pytest.raises(errors.RequestError, match="SSE-C and the request did not carry its key"):
            await keyless.head_object(bucket, "put.bin")  # a HEAD's 400 has no body to say why
    wrong = _store(tls_endpoint.url, sse_customer_key=OTHER_KEY, ca_bundle=tls_endpoint.ca_bundle)
    async with wrong.client() as other:
        with pytest.raises(errors.AccessDenied) as denied:
            await other.get_object(bucket, "put.bin", 0, 10)
    assert CUSTOMER_KEY not in str(denied.value) and OTHER_KEY not in str(denied.value)


async def test_the_customer_key_goes_only_over_https_and_never_into_a_repr_a_log_or_an_error(
    s3_endpoint: Any, tls_endpoint: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(s3_endpoint.url, sse_customer_key=CUSTOMER_KEY)
    with pytest.raises(errors.InvalidConfig, match="takes it only over https"):
        store.client()
    tls = store.replace(endpoint=tls_endpoint.url, ca_bundle=tls_endpoint.ca_bundle)
    shown = [repr(tls), tls.describe(), repr(pickle.loads(pickle.dumps(tls))), repr(tls.encryption)]
    caplog.set_level(logging.DEBUG)
    async with tls.client() as client:
        shown.append(repr(client))
        with pytest.raises(errors.NotFound) as missing:
            await client.head_object(bucket, "absent.bin")
        shown.append(str(missing.value))
    shown.append(caplog.text)
    for text in shown:
        assert CUSTOMER_KEY not in text and KEY_BYTES.hex() not in text
    assert "SSE-C (customer key)" in tls.describe()
    assert pickle.loads(pickle.dumps(tls)).sse_customer_key == CUSTOMER_KEY  # what a worker needs, it gets


async def test_requester_pays_rides_on_every_request(s3_endpoint: Any, bucket: str, s3_security: Any) -> None:
    with s3_security.requester_pays(bucket):
        async with _store(s3_endpoint.url).client() as owner_only:
            with pytest.raises(errors.AccessDenied):
                await owner_only.put_object(bucket, "a.bin", b"data")
        async with _store(s3_endpoint.url, requester_pays=True).client() as client:
            await _write_every_way(client, bucket)
            assert [o.key async for o in client.list_objects(bucket)] == ["copy.bin", "multipart.bin", "put.bin"]
            assert (await client.get_object(bucket, "put.bin", 0, 4)).data == BODY[:4]
            await client.head_object(bucket, "multipart.bin")
            result = await client.delete_objects(bucket, ["copy.bin", "multipart.bin"])
            assert not result.errors
            await client.delete_object(bucket, "put.bin")


# ----------------------------------------------------------------------------- a lost completion, ETags not MD5s


async def test_a_lost_completion_of_sse_kms_parts_is_recognised_by_the_checksum_not_the_etag() -> None:
    """SSE-KMS parts' ETags are not their data's MD5, so the object's ETag is not the MD5 of theirs: the retried
    completion that finds the upload gone tells its own object by the full-object checksum it stated, and refuses
    another writer's object of the same ETag form."""
    state: dict[str, Any] = {"completions": 0, "stated": None, "replaced": False}

    async def s3(request: Any) -> MockResponse:
        if request.method == "POST" and "uploads=" in request.target:
            body = b"<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>"
            return MockResponse(200, {}, body)
        if request.method == "PUT":
            return MockResponse(200, {"ETag": f'"{os.urandom(16).hex()}"'})  # SSE-KMS: not the part's MD5
        if request.method == "POST":
            state["completions"] += 1
            state["stated"] = request.headers.get("x-amz-checksum-crc64nvme")
            if state["completions"] == 1:  # completed, but the answer is lost
                return MockResponse(500, {}, b"<Error><Code>InternalError</Code></Error>")
            return MockResponse(404, {}, b"<Error><Code>NoSuchUpload</Code></Error>")
        headers = {"ETag": '"3858f62230ac3c915f300c664312c63f-2"', "Content-Length": "12"}
        if request.headers.get("x-amz-checksum-mode") == "ENABLED":
            kept = "AAAAAAAAAAA=" if state["replaced"] else state["stated"]
            headers.update({"x-amz-checksum-crc64nvme": kept, "x-amz-checksum-type": "FULL_OBJECT"})
        return MockResponse(200, headers)

    async def upload_and_complete(client: Any) -> Any:
        state["completions"] = 0
        upload = await client.create_multipart_upload("bucket", "k")
        parts = [(n, await client.upload_part("bucket", "k", upload, n, b"x" * 6)) for n in (1, 2)]
        return await client.complete_multipart_upload("bucket", "k", upload, parts)

    store = StoreConfig(endpoint="http://127.0.0.1:9", sse="aws:kms", policy=FAST)
    async with store.client(transport=MockTransport(s3, FAST)) as client:
        result = await upload_and_complete(client)
        assert result.etag == '"3858f62230ac3c915f300c664312c63f-2"'
        assert isinstance(result.checksum, StoredChecksum) and result.checksum.value == state["stated"]
        state["replaced"] = True  # another writer's object is there now: its ETag alike, its checksum not
        with pytest.raises(errors.NotFound, match="the checksum it keeps is not the CRC64NVME"):
            await upload_and_complete(client)
    assert Encryption.of("aws:kms").etags_are_digests is False and Encryption.of("AES256").etags_are_digests
