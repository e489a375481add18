"""The S3 client's writes and deletes: PUT (conditional on If-Match / If-None-Match), DELETE (on an ETag or
unmodified-since), DeleteObjects in batches, CopyObject, CreateBucket."""

from __future__ import annotations

import time
from collections.abc import Mapping
from urllib.parse import quote

from s3io import errors
from s3io.resilience.deadline import Watchdog
from s3io.s3 import xml
from s3io.s3.capabilities import VERDICTS, EtagForm
from s3io.s3.checksum_refusals import Feature
from s3io.s3.checksums import (
    ALGORITHM_HEADER,
    UPLOAD_ALGORITHM,
)
from s3io.s3.request import S3Request
from s3io.s3.request_core import RequestCore, _check_etag, _check_key, _md5, _put_result
from s3io.s3.types import DeleteError, DeleteResult, PutResult

DELETE_BATCH = 1000

# A single DELETE's answers that concern its key alone: reported per key, as DeleteObjects reports them; anything
# else (the server gone, the deadline, throttling past the retries) fails the whole call at once, as a batch's
# would, instead of costing every remaining key an operation's deadline of its own.
_KEY_REFUSALS = (errors.AccessDenied, errors.PreconditionFailed, errors.NotFound, errors.RequestError)


class ObjectWrites(RequestCore):
    """PUT, DELETE, DeleteObjects, CopyObject, CreateBucket (see the module doc)."""

    async def put_object(
        self,
        bucket: str,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        if_match_form: EtagForm | None = None,
        content_type: str | None = None,
    ) -> PutResult:
        """Write an object; ``if_none_match=True`` creates it only if absent (PreconditionFailed otherwise).

        ``if_match``: replace it only if its ETag is this one, written in ``if_match_form``; by default in the form
        the store's probed capabilities say it honours (``probe.store_capabilities``: Ceph RGW 16 takes it only
        unquoted), else as given. The body carries its CRC64NVME (``Policy.checksums``: the store checks it and keeps
        it for readers), or its Content-MD5 where checksums are ``required`` or the store refuses the CRC header
        (``upload_checksums``)."""
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        headers: dict[str, str] = dict(self._write_headers)
        if if_none_match:
            headers["if-none-match"] = "*"
        if if_match is not None:
            if if_match_form is None and (verdict := VERDICTS.get(self._endpoint_key, bucket)) is not None:
                if_match_form = verdict.if_match_form
            headers["if-match"] = if_match if if_match_form is None else if_match_form.render(if_match)
        if content_type:
            headers["content-type"] = content_type

        async def put(crc: bool) -> PutResult:
            sent = {**headers, **self._checksums.body_headers(data, crc=crc)}

            async def attempt(watchdog: Watchdog) -> PutResult:
                response = await self._send(
                    watchdog, S3Request("put", "PUT", bucket, key, headers=dict(sent), body=data)
                )
                return PutResult(response.headers.get("ETag"), self._checksums.stated(sent))

            return await self._runner.run("put", bucket, key, attempt)

        return await self._checksums.send(Feature.UPLOAD_CHECKSUMS, put)

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket in the client's region; a bucket that already exists and is ours is not an error."""
        region = self.endpoint.region
        body = None
        if region != "us-east-1":
            body = (
                '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
            ).encode()

        async def attempt(watchdog: Watchdog) -> None:
            try:
                await self._send(watchdog, S3Request("create_bucket", "PUT", bucket, body=body))
            except errors.RequestError as exc:
                if exc.code != "BucketAlreadyOwnedByYou":
                    raise

        await self._runner.run("create_bucket", bucket, None, attempt)

    async def delete_object(
        self, bucket: str, key: str, *, if_match: str | None = None, if_unmodified_since: float | None = None
    ) -> None:
        """Delete one object (absent objects are not an error, as in S3). ``if_match``: only if it has that ETag;
        ``if_unmodified_since`` (seconds since the epoch): only if its Last-Modified is not later, by Ceph RGW's
        ``x-amz-delete-if-unmodified-since`` (ISO 8601, whole seconds; a store without it ignores it: the probe
        says which honours it). Either refused: PreconditionFailed."""
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        headers = {"if-match": if_match} if if_match is not None else {}
        if if_unmodified_since is not None:
            headers["x-amz-delete-if-unmodified-since"] = iso8601_seconds(if_unmodified_since)

        async def attempt(watchdog: Watchdog) -> None:
            await self._send(watchdog, S3Request("delete", "DELETE", bucket, key, headers=dict(headers)))

        await self._runner.run("delete", bucket, key, attempt)

    async def delete_objects(
        self, bucket: str, keys: list[str], *, etags: Mapping[str, str] | None = None
    ) -> DeleteResult:
        """Delete many objects in DeleteObjects batches of 1000; per-key failures come back in ``errors``.

        ``etags``: a key listed there is deleted only if it still has that ETag (S3's per-object condition; a
        store that ignores it deletes anyway: check support before relying on it). A key holding a character XML
        1.0 cannot carry as sent (a control character other than tab and LF) cannot travel in DeleteObjects' body:
        such keys are deleted one DELETE each (If-Match their ETag), their outcome reported the same way."""
        etags = dict(etags or {})
        for key in keys:
            _check_key(bucket, key)
            _check_etag(bucket, key, etags.get(key))
        deleted: list[str] = []
        failed: list[DeleteError] = []
        for key in [k for k in keys if not xml.xml_safe(k)]:
            try:
                await self.delete_object(bucket, key, if_match=etags.get(key))
                deleted.append(key)
            except _KEY_REFUSALS as exc:  # S3's answer for this key, as DeleteObjects reports one
                failed.append(DeleteError(key, exc.code or type(exc).__name__, exc.message))
        keys = [k for k in keys if xml.xml_safe(k)]
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            body = xml.delete_request(batch, etags)

            async def attempt(
                watchdog: Watchdog, body: bytes = body, batch: list[str] = batch
            ) -> tuple[list[str], list[DeleteError]]:
                response = await self._send(
                    watchdog,
                    S3Request(
                        "delete_many",
                        "POST",
                        bucket,
                        query={"delete": ""},
                        headers={"content-md5": _md5(body)},
                        body=body,
                        error_in_200=True,
                    ),
                )
                ok, bad = xml.parse_delete_result(response.body)
                answered = set(ok).union(e.key for e in bad)
                missing = [k for k in batch if k not in answered]
                if missing:
                    raise errors.ProtocolError(
                        f"a DeleteObjects answer says nothing of {len(missing)} of the {len(batch)} keys sent (e.g. "
                        f"{xml.shorten(missing[0], 128)!r}): neither deleted nor failed",
                        bucket=bucket,
                    )
                return ok, bad

            ok, bad = await self._runner.run("delete_many", bucket, None, attempt)
            deleted.extend(ok)
            failed.extend(bad)
        return DeleteResult(tuple(deleted), tuple(failed))

    async def copy_object(
        self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, *, if_match: str | None = None
    ) -> PutResult:
        """Server-side copy (up to 5 GiB); ``if_match`` pins the source version. Where checksums are sent
        (``Policy.checksums``), the copy asks for the CRC64NVME of what it wrote (``x-amz-checksum-algorithm``):
        ``PutResult.checksum`` is the one the answer states (None where it states none), for the caller to compare
        with the source's; a store that refuses the header is learnt once and copied to without it."""
        _check_key(src_bucket, src_key)
        _check_key(dst_bucket, dst_key)
        _check_etag(src_bucket, src_key, if_match)
        headers = {
            "x-amz-copy-source": quote(f"/{src_bucket}/{src_key}", safe="/~"),
            **self._write_headers,
            **self.encryption.copy_source_headers(),
        }
        if if_match is not None:
            headers["x-amz-copy-source-if-match"] = if_match

        async def copy(checksum: bool) -> PutResult:
            sent = {**headers, ALGORITHM_HEADER: UPLOAD_ALGORITHM.name} if checksum else headers

            async def attempt(watchdog: Watchdog) -> PutResult:
                response = await self._send(
                    watchdog,
                    S3Request("copy", "PUT", dst_bucket, dst_key, headers=dict(sent), error_in_200=True),
                )
                return _put_result(response.body, "CopyObjectResult", dst_bucket, dst_key)

            return await self._runner.run("copy", dst_bucket, dst_key, attempt)

        return await self._checksums.send(Feature.UPLOAD_CHECKSUMS, copy)


def iso8601_seconds(when: float) -> str:
    """``when`` (seconds since the epoch) as ISO 8601 UTC in whole seconds, the form RGW's delete condition takes
    (``2026-11-28T15:04:05Z``; RFC 1123 and epoch forms are refused with 400). Truncated, as Last-Modified is."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(when)))
