"""S3Client: every S3 operation as one method, each run through the attempt runner (deadlines + retries).

Ranges are half-open ``[start, end)`` byte offsets. A GET that dies after k bytes resumes from byte k,
pinned to the first response's ETag with If-Match, so an object overwritten mid-read raises ObjectChanged
instead of returning mixed bytes; partial data is never returned as success.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from urllib.parse import quote

from multidict import CIMultiDictProxy

from s3io import errors
from s3io.attempt import AttemptRunner
from s3io.deadline import Watchdog
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.policy import Policy
from s3io.retryable import error_for_status
from s3io.s3 import xml
from s3io.s3.multipart import MultipartWriter
from s3io.s3.redirect import bucket_region, regional_endpoint
from s3io.s3.types import DeleteError, DeleteResult, GetResult, MultipartUpload, ObjectInfo, PutResult
from s3io.transport.credentials import CredentialProvider, Credentials
from s3io.transport.endpoint import Endpoint, resolve_endpoint
from s3io.transport.exchange import Response, exchange
from s3io.transport.session import HttpSession, make_session
from s3io.transport.sigv4 import EMPTY_SHA256, UNSIGNED_PAYLOAD, Signer, canonical_query

DELETE_BATCH = 1000
log = logging.getLogger("s3io")


class S3Client:
    """An S3 client bound to one event loop. Use ``async with S3Client(...) as s3`` or call ``close()``."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        credentials: Credentials | str | None = None,
        addressing: str = "auto",
    ) -> None:
        self.policy = policy if policy is not None else Policy.from_env()
        self.endpoint = resolve_endpoint(endpoint_url, region, addressing)
        self.metrics = Metrics()
        self._credentials = CredentialProvider(credentials, self.endpoint.region)
        refresh = self._credentials.refresh if self._credentials.refreshable else None  # else a retry changes nothing
        self._runner = AttemptRunner(self.policy, self.metrics, refresh_credentials=refresh)
        self._session: HttpSession | None = None
        self._bucket_endpoints: dict[str, Endpoint] = {}  # buckets S3 said live in another region
        self._regional_signers: dict[tuple[Signer, str], Signer] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"S3Client(endpoint={self.endpoint.scheme}://{self.endpoint.host}, {self._credentials!r})"

    async def __aenter__(self) -> S3Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; the client cannot be used afterwards (in-flight operations fail)."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def abort(self) -> None:
        """Close the connections synchronously, from any thread, e.g. when the client's event loop has stopped."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            session.abort()

    def stats(self) -> MetricsSnapshot:
        """Counters so far: requests by (operation, status), retries by reason, timeouts by phase, bytes."""
        return self.metrics.snapshot()

    # ----------------------------------------------------------------- plumbing

    def _http(self) -> HttpSession:
        if self._session is None:
            if self._closed:
                raise RuntimeError("this S3Client is closed; create a new one")
            self._session = make_session(self.policy)
        return self._session

    async def _send(
        self,
        watchdog: Watchdog,
        operation: str,
        method: str,
        bucket: str,
        key: str = "",
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        on_headers: Callable[[int, CIMultiDictProxy[str]], None] | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
        error_in_200: bool = False,
        redirected: bool = False,
    ) -> Response:
        endpoint = self._bucket_endpoints.get(bucket, self.endpoint) if self._bucket_endpoints else self.endpoint
        host, path = endpoint.target(bucket, key)
        qs = canonical_query(query) if query else ""
        headers = {} if headers is None else headers
        headers["host"] = host
        signer = self._credentials.ready_signer() or await self._credentials.signer()
        if signer is not None:
            if signer.region != endpoint.region:
                signer = self._signer_for(signer, endpoint.region)
            payload_hash = EMPTY_SHA256 if not body else hashlib.sha256(body).hexdigest()
            signer.sign(method, path, qs, headers, payload_hash)
        elif body:
            headers["x-amz-content-sha256"] = UNSIGNED_PAYLOAD
        status: int | str = "error"
        try:
            response = await exchange(
                self._session or self._http(),
                watchdog,
                self.policy,
                method,
                endpoint.scheme,
                host,
                f"{path}?{qs}" if qs else path,
                headers,
                body,
                on_headers=on_headers,
                on_chunk=on_chunk,
            )
            status = response.status
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        finally:
            self.metrics.request(operation, status, watchdog.elapsed())
            if body:
                self.metrics.bytes_out += len(body)
        self.metrics.bytes_in += response.received
        if response.status >= 300 or (error_in_200 and response.body):
            region = bucket_region(response.status, response.headers, response.body) if bucket else None
            if region is not None and region != endpoint.region and not redirected:
                self._learn_region(bucket, region)
                return await self._send(
                    watchdog,
                    operation,
                    method,
                    bucket,
                    key,
                    query=query,
                    headers=headers,
                    body=body,
                    on_headers=on_headers,
                    on_chunk=on_chunk,
                    error_in_200=error_in_200,
                    redirected=True,
                )
            code, message = xml.error_fields(response.body)
            if response.status >= 300 or code is not None:
                if region is not None:
                    message = f"{message or 'wrong region'} (the bucket is in {region}; pass region={region!r})"
                raise error_for_status(
                    response.status, code or _status_code(response.status), message, bucket=bucket, key=key or None
                )
        return response

    def _learn_region(self, bucket: str, region: str) -> None:
        """Send this bucket's requests to ``region`` from now on (S3 said it lives there)."""
        log.warning(
            "bucket %s is in region %s, not %s: re-signing for %s (pass region=%r to skip the redirect)",
            bucket,
            region,
            self.endpoint.region,
            region,
            region,
        )
        self._bucket_endpoints[bucket] = regional_endpoint(self.endpoint, region)

    def _signer_for(self, signer: Signer, region: str) -> Signer:
        """``signer``'s credentials for another region, kept until the credentials change."""
        regional = self._regional_signers.get((signer, region))
        if regional is None:
            if len(self._regional_signers) > 64:
                self._regional_signers.clear()  # old credentials' signers
            regional = self._regional_signers[(signer, region)] = signer.for_region(region)
        return regional

    # ----------------------------------------------------------------- reads

    async def get_object(
        self,
        bucket: str,
        key: str,
        start: int | None = None,
        end: int | None = None,
        *,
        if_match: str | None = None,
    ) -> GetResult:
        """Bytes ``[start, end)`` of an object (whole object when both are None; ``start=-n``: the last n bytes).

        Resumes a broken body from the last byte received, pinned to the ETag; raises ObjectChanged if the
        object was replaced, Truncated/DeadlineExceeded/... after the policy's retries.
        """
        if start is None and end is not None:
            start = 0
        if start is not None and end is not None and start >= 0 and end <= start:
            if end < start:
                raise errors.InvalidConfig(f"range: end ({end}) is before start ({start})", bucket=bucket, key=key)
            return GetResult(b"", if_match, None, start)
        read = _RangeRead(bucket, key, start, end, if_match)

        async def attempt(watchdog: Watchdog) -> None:
            headers: dict[str, str] = {}
            range_header = read.range_header()
            if range_header:
                headers["range"] = range_header
            if read.etag:
                headers["if-match"] = read.etag
            try:
                await self._send(
                    watchdog, "get", "GET", bucket, key, headers=headers, on_headers=read.on_headers, on_chunk=read.add
                )
            except errors.PreconditionFailed as exc:
                raise errors.ObjectChanged(
                    f"object changed during the read (ETag is no longer {read.etag})", bucket=bucket, key=key
                ) from exc
            read.check_complete()

        await self._runner.run("get", bucket, key, attempt)
        return read.result()

    async def head_object(self, bucket: str, key: str, *, if_match: str | None = None) -> ObjectInfo:
        """Size, ETag and modification time of an object; NotFound if it does not exist."""
        headers = {"if-match": if_match} if if_match else {}

        async def attempt(watchdog: Watchdog) -> ObjectInfo:
            response = await self._send(watchdog, "head", "HEAD", bucket, key, headers=dict(headers))
            return _info_from_headers(bucket, key, response.headers)

        return await self._runner.run("head", bucket, key, attempt)

    async def list_page(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        continuation_token: str | None = None,
        start_after: str | None = None,
        max_keys: int = 1000,
    ) -> tuple[list[ObjectInfo], list[str], str | None]:
        """One ListObjectsV2 page: (objects, common prefixes, next continuation token or None)."""
        query = {"list-type": "2", "max-keys": str(max_keys)}
        if prefix:
            query["prefix"] = prefix
        if delimiter:
            query["delimiter"] = delimiter
        if continuation_token:
            query["continuation-token"] = continuation_token
        if start_after:
            query["start-after"] = start_after

        async def attempt(watchdog: Watchdog) -> tuple[list[ObjectInfo], list[str], str | None]:
            response = await self._send(watchdog, "list", "GET", bucket, query=query)
            return xml.parse_list_page(bucket, response.body)

        return await self._runner.run("list", bucket, prefix, attempt)

    async def list_objects(
        self, bucket: str, prefix: str = "", *, delimiter: str | None = None, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix``, page by page (each page is its own operation with its own deadline)."""
        token: str | None = None
        while True:
            objects, _, token = await self.list_page(
                bucket, prefix, delimiter=delimiter, continuation_token=token, start_after=start_after
            )
            for obj in objects:
                yield obj
            if token is None:
                return

    async def list_prefixes(self, bucket: str, prefix: str = "", delimiter: str = "/") -> list[str]:
        """The common prefixes ("directories") directly under ``prefix``."""
        result: list[str] = []
        token: str | None = None
        while True:
            _, prefixes, token = await self.list_page(bucket, prefix, delimiter=delimiter, continuation_token=token)
            result.extend(prefixes)
            if token is None:
                return result

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
        while True:
            query = {"uploads": "", "max-uploads": str(page_size)}
            if prefix:
                query["prefix"] = prefix
            if markers is not None:
                query["key-marker"], query["upload-id-marker"] = markers

            async def attempt(
                watchdog: Watchdog, query: dict[str, str] = query
            ) -> tuple[list[MultipartUpload], tuple[str, str] | None]:
                response = await self._send(watchdog, "list_uploads", "GET", bucket, query=query)
                return xml.parse_uploads_page(bucket, response.body)

            uploads, next_markers = await self._runner.run("list_uploads", bucket, prefix, attempt)
            for upload in uploads:
                yield upload
            if next_markers is None or next_markers == markers:
                return
            markers = next_markers

    # ----------------------------------------------------------------- writes

    async def put_object(
        self,
        bucket: str,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        content_type: str | None = None,
    ) -> PutResult:
        """Write an object; ``if_none_match=True`` creates it only if absent (PreconditionFailed otherwise)."""
        headers: dict[str, str] = {"content-md5": _md5(data)}
        if if_none_match:
            headers["if-none-match"] = "*"
        if if_match:
            headers["if-match"] = if_match
        if content_type:
            headers["content-type"] = content_type

        async def attempt(watchdog: Watchdog) -> PutResult:
            response = await self._send(watchdog, "put", "PUT", bucket, key, headers=dict(headers), body=data)
            return PutResult(response.headers.get("ETag"))

        return await self._runner.run("put", bucket, key, attempt)

    async def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        headers = {"content-type": content_type} if content_type else {}

        async def attempt(watchdog: Watchdog) -> str:
            response = await self._send(
                watchdog, "create_multipart", "POST", bucket, key, query={"uploads": ""}, headers=dict(headers)
            )
            upload_id = xml.parse(response.body).findtext("UploadId")
            if not upload_id:
                raise errors.RequestError("CreateMultipartUpload returned no UploadId", bucket=bucket, key=key)
            return upload_id

        return await self._runner.run("create_multipart", bucket, key, attempt)

    async def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        """Upload one part; returns its ETag."""
        query = {"partNumber": str(part_number), "uploadId": upload_id}

        async def attempt(watchdog: Watchdog) -> str:
            headers = {"content-md5": _md5(data)}
            response = await self._send(
                watchdog, "upload_part", "PUT", bucket, key, query=query, headers=headers, body=data
            )
            etag = response.headers.get("ETag")
            if not etag:
                raise errors.RequestError("UploadPart returned no ETag", bucket=bucket, key=key)
            return etag

        return await self._runner.run("upload_part", bucket, key, attempt)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> PutResult:
        """Assemble the parts; an <Error> inside a 200 response is detected and retried like a 5xx."""
        body = xml.complete_multipart_request(sorted(parts))

        async def attempt(watchdog: Watchdog) -> PutResult:
            response = await self._send(
                watchdog,
                "complete_multipart",
                "POST",
                bucket,
                key,
                query={"uploadId": upload_id},
                body=body,
                error_in_200=True,
            )
            return PutResult(xml.parse(response.body).findtext("ETag"))

        return await self._runner.run("complete_multipart", bucket, key, attempt)

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        async def attempt(watchdog: Watchdog) -> None:
            try:
                await self._send(watchdog, "abort_multipart", "DELETE", bucket, key, query={"uploadId": upload_id})
            except errors.NotFound:
                return

        await self._runner.run("abort_multipart", bucket, key, attempt)

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
                await self._send(watchdog, "create_bucket", "PUT", bucket, body=body)
            except errors.RequestError as exc:
                if exc.code != "BucketAlreadyOwnedByYou":
                    raise

        await self._runner.run("create_bucket", bucket, None, attempt)

    def multipart_writer(
        self,
        bucket: str,
        key: str,
        *,
        part_size: int = 8 * 1024 * 1024,
        concurrency: int = 4,
        content_type: str | None = None,
    ) -> MultipartWriter:
        """A streaming writer: parts uploaded in parallel, bounded memory, aborted on any failure."""
        return MultipartWriter(
            self, bucket, key, part_size=part_size, concurrency=concurrency, content_type=content_type
        )

    async def delete_object(self, bucket: str, key: str, *, if_match: str | None = None) -> None:
        """Delete one object (absent objects are not an error, as in S3)."""
        headers = {"if-match": if_match} if if_match else {}

        async def attempt(watchdog: Watchdog) -> None:
            await self._send(watchdog, "delete", "DELETE", bucket, key, headers=dict(headers))

        await self._runner.run("delete", bucket, key, attempt)

    async def delete_objects(self, bucket: str, keys: list[str]) -> DeleteResult:
        """Delete many objects in DeleteObjects batches of 1000; per-key failures come back in ``errors``."""
        deleted: list[str] = []
        failed: list[DeleteError] = []
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            body = xml.delete_request(batch)

            async def attempt(watchdog: Watchdog, body: bytes = body) -> tuple[list[str], list[DeleteError]]:
                response = await self._send(
                    watchdog,
                    "delete_many",
                    "POST",
                    bucket,
                    query={"delete": ""},
                    headers={"content-md5": _md5(body)},
                    body=body,
                )
                return xml.parse_delete_result(response.body)

            ok, bad = await self._runner.run("delete_many", bucket, None, attempt)
            deleted.extend(ok)
            failed.extend(bad)
        return DeleteResult(tuple(deleted), tuple(failed))

    async def copy_object(
        self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, *, if_match: str | None = None
    ) -> PutResult:
        """Server-side copy (up to 5 GiB); ``if_match`` pins the source version."""
        headers = {"x-amz-copy-source": quote(f"/{src_bucket}/{src_key}", safe="/~")}
        if if_match:
            headers["x-amz-copy-source-if-match"] = if_match

        async def attempt(watchdog: Watchdog) -> PutResult:
            response = await self._send(
                watchdog, "copy", "PUT", dst_bucket, dst_key, headers=dict(headers), error_in_200=True
            )
            return PutResult(xml.parse(response.body).findtext("ETag"))

        return await self._runner.run("copy", dst_bucket, dst_key, attempt)


class _RangeRead:
    """State of one ranged GET across attempts: bytes so far, the pinned ETag, the absolute offsets."""

    __slots__ = (
        "abs_start",
        "bucket",
        "chunks",
        "end",
        "etag",
        "expected",
        "key",
        "received",
        "size",
        "skip",
        "start",
        "unsized",
    )

    def __init__(self, bucket: str, key: str, start: int | None, end: int | None, etag: str | None) -> None:
        self.bucket = bucket
        self.key = key
        self.start = start
        self.end = end
        self.etag = etag
        self.chunks: list[bytes] = []
        self.received = 0
        self.abs_start: int | None = start if start is not None and start >= 0 else None
        self.expected: int | None = None
        self.size: int | None = None
        self.skip = 0  # leading bytes of a 200 answer to a suffix request that are not part of the tail
        self.unsized = False  # a 200 without Content-Length (chunked, or ended by close): sliced at the end

    def range_header(self) -> str | None:
        if self.abs_start is None:
            if self.start is None:
                return None
            return f"bytes={self.start}"  # suffix range: start is -n, the header is bytes=-n
        first = self.abs_start + self.received
        if first == 0 and self.end is None:
            return None  # the whole object: no Range header (a Range on an empty object would be a 416)
        if self.end is not None:
            return f"bytes={first}-{self.end - 1}"
        if self.expected is not None:
            return f"bytes={first}-{self.abs_start + self.expected - 1}"
        return f"bytes={first}-" if first or self.start is not None else None

    def on_headers(self, status: int, headers: CIMultiDictProxy[str]) -> None:
        if status >= 300:
            return
        etag = headers.get("ETag")
        if self.etag is None:
            self.etag = etag
        elif etag is not None and _bare_etag(etag) != _bare_etag(self.etag):
            raise errors.ObjectChanged(
                f"object changed during the read (ETag {etag}, expected {self.etag})", bucket=self.bucket, key=self.key
            )
        first = (self.abs_start or 0) + self.received
        if status == 206:
            begin, last, total = _content_range(headers.get("Content-Range"), self.bucket, self.key)
            if self.abs_start is not None and begin != first:
                raise errors.Truncated(
                    f"Content-Range starts at {begin}, asked for {first}", bucket=self.bucket, key=self.key
                )
            if self.abs_start is None:
                self.abs_start = begin
            self.size = total
            if self.expected is None:
                self.expected = last + 1 - self.abs_start
            elif last + 1 != self.abs_start + self.expected:
                raise errors.Truncated(
                    f"Content-Range ends at {last}, expected {self.abs_start + self.expected - 1}",
                    bucket=self.bucket,
                    key=self.key,
                )
        elif status == 200:
            if first != 0 or self.received:
                raise errors.RequestError(
                    "server ignored the Range header of a resumed read",
                    bucket=self.bucket,
                    key=self.key,
                    code="RangeIgnored",
                )
            length_header = headers.get("Content-Length")
            if length_header is None:  # the parser frames the body (chunked or until close); slice it when whole
                self.unsized = True
                self.abs_start = 0
                return
            length = int(length_header)
            self.size = length
            if self.start is not None and self.start < 0:  # a suffix request answered with the whole object
                self.skip = max(0, length + self.start)
            self.abs_start = self.skip
            want = length if self.end is None else min(self.end, length)
            if self.expected is None:
                self.expected = want - self.skip

    def add(self, chunk: bytes) -> None:
        if self.skip:
            dropped = min(self.skip, len(chunk))
            chunk = chunk[dropped:]
            self.skip -= dropped
            if not chunk:
                return
        if self.expected is not None and self.received + len(chunk) > self.expected:
            chunk = chunk[: self.expected - self.received]
        self.chunks.append(chunk)
        self.received += len(chunk)

    def check_complete(self) -> None:
        if self.expected is not None and self.received < self.expected:
            raise errors.Truncated(
                f"body ended after {self.received} of {self.expected} bytes", bucket=self.bucket, key=self.key
            )

    def result(self) -> GetResult:
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        if self.unsized:  # ``data`` is the whole object from byte 0: cut out what was asked for
            total = len(data)
            if self.start is not None and self.start < 0:
                first = max(0, total + self.start)
            else:
                first = min(self.start or 0, total)
            last = total if self.end is None else min(self.end, total)
            return GetResult(data[first:last], self.etag, total, first)
        return GetResult(data, self.etag, self.size, self.abs_start or 0)


def _content_range(value: str | None, bucket: str, key: str) -> tuple[int, int, int | None]:
    """Parse ``bytes a-b/total`` (total may be ``*``)."""
    try:
        unit, _, spec = (value or "").partition(" ")
        span, _, total = spec.partition("/")
        a, _, b = span.partition("-")
        if unit != "bytes":
            raise ValueError(value)
        return int(a), int(b), None if total == "*" else int(total)
    except ValueError:
        raise errors.Truncated(f"invalid Content-Range {value!r}", bucket=bucket, key=key) from None


def _info_from_headers(bucket: str, key: str, headers: CIMultiDictProxy[str]) -> ObjectInfo:
    modified = headers.get("Last-Modified")
    return ObjectInfo(
        bucket=bucket,
        key=key,
        size=int(headers.get("Content-Length", "0")),
        etag=headers.get("ETag"),
        last_modified=parsedate_to_datetime(modified).timestamp() if modified else None,
    )


def _bare_etag(etag: str) -> str:
    """An ETag without a weak marker or quotes, for comparison."""
    return etag.removeprefix("W/").strip('"')


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _status_code(status: int) -> str:
    return {404: "NotFound", 403: "AccessDenied", 412: "PreconditionFailed", 503: "SlowDown"}.get(status, str(status))
