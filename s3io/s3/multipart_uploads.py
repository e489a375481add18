"""The S3 client's multipart uploads: create, upload a part, complete (an answer lost or missing its ETag
recognised as our own completion), abort, list and the writer that streams parts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from s3io import errors
from s3io.resilience.deadline import SendFloor, Watchdog
from s3io.resilience.upload_pace import PartsInFlight
from s3io.s3 import xml
from s3io.s3.checksum_refusals import Feature, is_refusal
from s3io.s3.checksums import (
    StoredChecksum,
)
from s3io.s3.etags import multipart_etag, same_etag
from s3io.s3.multipart import MultipartWriter
from s3io.s3.paging import ListingGuard
from s3io.s3.request import S3Request
from s3io.s3.request_core import RequestCore, _check_key, _put_result, log
from s3io.s3.types import MultipartUpload, ObjectInfo, PutResult
from s3io.s3.upload_checksums import UploadChecksums

COMPLETE_MULTIPART_HEAD = "complete_multipart_head"  # the HEAD that reads an ETag a store left out of its answer


class MultipartUploads(RequestCore):
    """Multipart uploads (see the module doc)."""

    async def list_multipart_uploads(
        self, bucket: str, prefix: str = "", *, page_size: int = 1000
    ) -> AsyncIterator[MultipartUpload]:
        """Uploads under ``prefix`` that were started and neither completed nor aborted, page by page.

        A process killed mid-upload leaves one behind (its parts stay stored); ``abort_multipart_upload``
        removes it. Each page is its own operation with its own deadline.
        """
        if not 1 <= page_size <= 1000:
            raise errors.InvalidConfig(f"page_size: expected 1 to 1000, got {page_size}", bucket=bucket)
        markers: tuple[str, str] | None = None
        guard = ListingGuard(bucket, prefix, "key and upload-id marker")
        while True:
            # No encoding-type=url: Ceph RGW 16 then url-encodes the keys (day=1 as day%3D1) without saying so in
            # the answer, and an upload read under that key cannot be aborted or matched. The plain answer is the
            # same on every store, and xml.parse reads the control characters a key may hold in it.
            query = {"uploads": "", "max-uploads": str(page_size)}
            if prefix:
                query["prefix"] = prefix
            if markers is not None:
                query["key-marker"], query["upload-id-marker"] = markers

            async def attempt(
                watchdog: Watchdog, query: dict[str, str] = query
            ) -> tuple[list[MultipartUpload], tuple[str, str] | None]:
                response = await self._send(watchdog, S3Request("list_uploads", "GET", bucket, query=query))
                return xml.parse_uploads_page(bucket, response.body)

            uploads, next_markers = await self._runner.run("list_uploads", bucket, prefix, attempt)
            guard.page([u.key for u in uploads], ordered=False)  # one key's uploads may span pages
            for upload in uploads:
                yield upload
            if next_markers is None:
                return
            guard.next(next_markers)
            markers = next_markers

    async def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        """Start a multipart upload; where checksums are sent, declared with a full-object CRC64NVME, which this
        client's ``upload_part`` and ``complete_multipart_upload`` then carry (parts of one upload go through one
        client)."""
        _check_key(bucket, key)
        headers = {"content-type": content_type} if content_type else {}
        headers.update(self._write_headers)

        async def create(full_object: bool) -> str:
            sent = {**headers, **UploadChecksums.create_headers(full_object)}

            async def attempt(watchdog: Watchdog) -> str:
                response = await self._send(
                    watchdog,
                    S3Request("create_multipart", "POST", bucket, key, query={"uploads": ""}, headers=dict(sent)),
                )
                upload_id = xml.parse(response.body, "CreateMultipartUpload answer").findtext("UploadId")
                if not upload_id:
                    raise errors.RequestError("CreateMultipartUpload returned no UploadId", bucket=bucket, key=key)
                return upload_id

            upload_id = await self._runner.run("create_multipart", bucket, key, attempt)
            if full_object:
                self._checksums.created(upload_id)
            return upload_id

        return await self._checksums.send(Feature.FULL_OBJECT_MULTIPART, create)

    async def upload_part(
        self, bucket: str, key: str, upload_id: str, part_number: int, data: bytes, floor: SendFloor | None = None
    ) -> str:
        """Upload one part (with its CRC when the upload was created with a checksum); returns its ETag. ``floor``:
        an attempt whose body is acknowledged slower than this fails with DeadlineExceeded phase "slow_send", not
        retried (a writer that can lower its parts in flight sends it again: s3io.resilience.upload_pace)."""
        _check_key(bucket, key)
        query = {"partNumber": str(part_number), "uploadId": upload_id}
        integrity = {**self._checksums.part_headers(upload_id, part_number, data), **self._read_headers}

        async def attempt(watchdog: Watchdog) -> str:
            headers = dict(integrity)
            watchdog.require_send_rate(floor)
            response = await self._send(
                watchdog,
                S3Request("upload_part", "PUT", bucket, key, query=query, headers=headers, body=data),
            )
            etag = response.headers.get("ETag")
            if not etag:
                raise errors.RequestError("UploadPart returned no ETag", bucket=bucket, key=key)
            return etag

        return await self._runner.run("upload_part", bucket, key, attempt)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> PutResult:
        """Assemble the parts; an <Error> inside a 200 response is detected and retried like a 5xx.

        A retry after a lost answer finds the upload gone (404 NoSuchUpload) although the object was written:
        the object is then looked up, and accepted if its ETag is the one S3 gives these parts. An answer whose
        <ETag> is empty (Ceph RGW 16's first answer) completed the upload: the ETag is read with one HEAD
        (``complete_multipart_head`` in the stats), never by completing again. An upload created with a checksum
        states each part's CRC and the whole object's, combined from them: S3 checks it against the object it
        assembled. A store that refuses it completes without it (learnt once), the parts' CRCs still in the XML;
        one that refuses those too (Swift 2.30.1: a ``<Part>`` carrying one is 400 MalformedXML) completes with the
        parts' numbers and ETags alone, which still name what is assembled (each part's CRC went with its upload).
        """
        _check_key(bucket, key)
        ordered = sorted(parts)
        values, full_object = self._checksums.completion(upload_id, [n for n, _ in ordered])
        element = self._checksums.element()

        async def complete(full: bool) -> PutResult:
            body = xml.complete_multipart_request(ordered, values, element)
            headers = {**full_object, **self._read_headers} if full else dict(self._read_headers)
            try:
                result = await self._complete(bucket, key, upload_id, ordered, body, headers)
            except errors.RequestError as exc:
                if full or not values or not is_refusal(exc):
                    raise
                bare = xml.complete_multipart_request(ordered)  # the fallback's last step: no part checksums either
                result = await self._complete(bucket, key, upload_id, ordered, bare, headers)
            return replace(result, checksum=self._checksums.stated(headers))

        if full_object:
            result = await self._checksums.send(Feature.FULL_OBJECT_MULTIPART, complete)
        else:
            result = await complete(False)
        self._checksums.finished(upload_id)  # kept after a failure: the caller may complete it again
        return result

    async def _complete(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        ordered: list[tuple[int, str]],
        body: bytes,
        headers: dict[str, str],
    ) -> PutResult:
        """CompleteMultipartUpload with ``body`` and ``headers``, its lost answer recognised (see the caller)."""
        tries = 0
        gone: list[errors.NotFound] = []

        async def attempt(watchdog: Watchdog) -> PutResult | None:
            nonlocal tries
            tries += 1
            try:
                response = await self._send(
                    watchdog,
                    S3Request(
                        "complete_multipart",
                        "POST",
                        bucket,
                        key,
                        query={"uploadId": upload_id},
                        headers=dict(headers),
                        body=body,
                        error_in_200=True,
                    ),
                )
            except errors.NotFound as exc:
                if tries == 1 or exc.code != "NoSuchUpload":
                    raise
                gone.append(exc)
                return None
            return _put_result(response.body, "CompleteMultipartUploadResult", bucket, key, etag_required=False)

        result = await self._runner.run("complete_multipart", bucket, key, attempt)
        stated = self._checksums.stated(headers)
        if result is None:  # looked up once the attempt is over: it holds a connection slot and a stall timer
            return await self._completed_by_lost_answer(bucket, key, ordered, stated, gone[-1])
        if result.etag is None:
            return await self._etag_left_out(bucket, key, ordered, stated)
        return result

    async def _made_of(
        self, bucket: str, key: str, info: ObjectInfo, parts: list[tuple[int, str]], stated: StoredChecksum | None
    ) -> bool:
        """Whether the object ``info`` describes is the one these parts make: its ETag is the one S3 gives them or,
        where an ETag is not its data's MD5 (SSE-KMS, SSE-C, a store of other ETags), the whole-object checksum it
        keeps is the one the completion stated (one HEAD). False when that cannot be told."""
        expected = multipart_etag([etag for _, etag in parts])
        if expected is not None and same_etag(info.etag, expected):
            return True
        if (expected is not None and self.encryption.etags_are_digests) or stated is None:
            return False
        try:
            kept = await self.object_checksum(bucket, key, if_match=info.etag)
        except errors.PreconditionFailed:  # replaced again since the HEAD: not ours to claim
            return False
        return kept is not None and kept.algorithm == stated.algorithm and kept.value == stated.value

    def _why_not_made_of(self, etag: str | None, parts: list[tuple[int, str]], stated: StoredChecksum | None) -> str:
        """Why ``_made_of`` said no, for an error or a log line."""
        expected = multipart_etag([e for _, e in parts])
        if expected is not None and self.encryption.etags_are_digests:
            return f"its ETag is {etag}, these parts make {expected}"
        if stated is None:
            return (
                f"its ETag ({etag}) is not an MD5 these parts' ETags make (SSE-KMS, SSE-C or another store's "
                "ETags), and no checksum was stated to tell by (checksums are not when_supported)"
            )
        return f"its ETag ({etag}) does not tell, and the checksum it keeps is not the {stated.describe()} stated"

    async def _etag_left_out(
        self, bucket: str, key: str, parts: list[tuple[int, str]], stated: StoredChecksum | None
    ) -> PutResult:
        """The upload completed but the answer named no ETag: the object's, if it is the one these parts make (one
        HEAD, see ``_made_of``); None if that cannot be told (another writer replaced it since, or neither the
        parts' ETags nor a checksum tell)."""
        info = await self._head(bucket, key, None, COMPLETE_MULTIPART_HEAD)
        if await self._made_of(bucket, key, info, parts, stated):
            return PutResult(info.etag)
        log.info(
            "s3://%s/%s: the store's CompleteMultipartUpload answer had no ETag and the object now there is not "
            "known to be the one these parts make (%s): its ETag is unknown",
            bucket,
            key,
            self._why_not_made_of(info.etag, parts, stated),
        )
        return PutResult(None)

    async def _completed_by_lost_answer(
        self,
        bucket: str,
        key: str,
        parts: list[tuple[int, str]],
        stated: StoredChecksum | None,
        exc: errors.NotFound,
    ) -> PutResult:
        """After NoSuchUpload on a retry: the PutResult if the object is the one these parts make (``_made_of``),
        else ``exc``."""
        try:
            info = await self.head_object(bucket, key)
        except errors.NotFound:
            raise exc from None
        if await self._made_of(bucket, key, info, parts, stated):
            log.info("s3://%s/%s: an earlier attempt completed the upload (its answer was lost)", bucket, key)
            return PutResult(info.etag)
        certain = multipart_etag([e for _, e in parts]) is not None and self.encryption.etags_are_digests
        raise errors.NotFound(
            "the multipart upload is gone (NoSuchUpload) and the object now at the key is "
            f"{'not' if certain else 'not known to be'} the one these parts make "
            f"({self._why_not_made_of(info.etag, parts, stated)}); another writer may have completed or replaced it",
            bucket=bucket,
            key=key,
            status=404,
            code="NoSuchUpload",
        ) from exc

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        _check_key(bucket, key)
        self._checksums.finished(upload_id)

        async def attempt(watchdog: Watchdog) -> None:
            try:
                await self._send(
                    watchdog, S3Request("abort_multipart", "DELETE", bucket, key, query={"uploadId": upload_id})
                )
            except errors.NotFound:
                return

        await self._runner.run("abort_multipart", bucket, key, attempt)

    async def upload_exists(self, bucket: str, key: str, upload_id: str) -> bool:
        """Whether a multipart upload is still open (neither completed nor aborted): ListParts of at most one part,
        answered 200 while it is and 404 NoSuchUpload once it is not. ListMultipartUploads is no substitute: on Ceph
        RGW 16 a listing of a write's prefix named none of its open uploads (measured)."""
        _check_key(bucket, key)

        async def attempt(watchdog: Watchdog) -> bool:
            try:
                await self._send(
                    watchdog,
                    S3Request("list_parts", "GET", bucket, key, query={"uploadId": upload_id, "max-parts": "1"}),
                )
            except errors.NotFound:
                return False
            return True

        return await self._runner.run("list_parts", bucket, key, attempt)

    def multipart_writer(
        self,
        bucket: str,
        key: str,
        *,
        part_size: int = 8 * 1024 * 1024,
        concurrency: int = 4,
        content_type: str | None = None,
        slots: PartsInFlight | None = None,
        after_part: Callable[[], None] | None = None,
    ) -> MultipartWriter:
        """A streaming writer: parts uploaded in parallel, bounded memory, aborted on any failure (see
        s3io.s3.multipart for ``slots``, ``after_part`` and ``stage()``)."""
        _check_key(bucket, key)
        return MultipartWriter(
            self,
            bucket,
            key,
            part_size=part_size,
            concurrency=concurrency,
            content_type=content_type,
            slots=slots,
            after_part=after_part,
        )
